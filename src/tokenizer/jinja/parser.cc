#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/error.h"
#include "tokenizer/jinja/expr_parser.h"

namespace pagoda::jinja {
namespace {

// Statements Jinja has but chat templates are not rendered with.
constexpr std::string_view kUnsupportedStatements[] = {
    "include", "import", "from", "extends", "block", "with", "raw", "do", "autoescape"};

class StatementParser {
 public:
  explicit StatementParser(std::vector<Token> tokens)
      : tokens_(std::move(tokens)), expressions_(tokens_) {}

  Body parse_template() { return parse_body({}, "", 0); }

 private:
  // Parses until one of `terminators` opens a statement; an empty list runs to the end.
  Body parse_body(std::initializer_list<std::string_view> terminators, std::string_view block,
                  int block_line) {
    Body body;
    if (terminators.size() > 0) open_blocks_.emplace_back(block, block_line);
    while (!tokens_.at_statement(terminators)) {
      if (tokens_.at_end()) {
        if (terminators.size() == 0) return body;
        fail("line {}: unclosed '{}' block: missing '{{% {} %}}'", block_line, block,
             *(terminators.end() - 1));
      }
      parse_node(body);
    }
    if (terminators.size() > 0) open_blocks_.pop_back();
    return body;
  }

  void parse_node(Body& body) {
    const Token& token = tokens_.next();
    switch (token.kind) {
      case TokenKind::kText:
        body.push_back(Stmt{token.line, TextStmt{token.value}});
        return;
      case TokenKind::kComment:
        return;
      case TokenKind::kOpenStatement:
        body.push_back(parse_statement());
        return;
      case TokenKind::kOpenExpression: {
        ExprPtr value = expressions_.expression();
        tokens_.expect(TokenKind::kCloseExpression, "'}}'");
        body.push_back(Stmt{token.line, OutputStmt{std::move(value)}});
        return;
      }
      default:
        fail("line {}: unexpected '{}'", token.line, token.value);
    }
  }

  // After the `{%`.
  Stmt parse_statement() {
    TokenStream::Nested nested(tokens_);
    const int line = tokens_.line();
    const std::string name = tokens_.expect(TokenKind::kIdentifier, "a statement name").value;
    if (name == "if") return Stmt{line, parse_if(line)};
    if (name == "for") return Stmt{line, parse_for(line)};
    if (name == "set") return Stmt{line, parse_set(line)};
    if (name == "macro") return Stmt{line, parse_macro(line)};
    if (name == "call") return Stmt{line, parse_call_block(line)};
    if (name == "filter") return Stmt{line, parse_filter_block(line)};
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) tokens_.error("'{}' outside of a for loop", name);
      expect_close();
      return Stmt{line, LoopControlStmt{name == "break"}};
    }
    if (name.starts_with("end") || name == "else" || name == "elif") {
      if (open_blocks_.empty()) tokens_.error("unexpected '{{% {} %}}'", name);
      tokens_.error("unexpected '{{% {} %}}' inside the '{}' block opened on line {}", name,
                    open_blocks_.back().first, open_blocks_.back().second);
    }
    if (std::find(std::begin(kUnsupportedStatements), std::end(kUnsupportedStatements), name) !=
        std::end(kUnsupportedStatements)) {
      tokens_.error("unsupported statement '{}'", name);
    }
    tokens_.error("unknown statement '{}'", name);
  }

  // Consumes `{% name`, which the stream is at, and returns the name.
  std::string enter_branch() {
    tokens_.skip(1);
    return tokens_.next().value;
  }

  IfStmt parse_if(int line) {
    IfStmt stmt;
    stmt.condition = expressions_.expression();
    expect_close();
    stmt.then_body = parse_body({"elif", "else", "endif"}, "if", line);
    const int branch_line = tokens_.line();
    const std::string branch = enter_branch();
    if (branch == "elif") {
      stmt.else_body.push_back(Stmt{branch_line, parse_if(line)});
      return stmt;  // the nested if consumed the endif
    }
    if (branch == "else") {
      expect_close();
      stmt.else_body = parse_body({"endif"}, "if", line);
      enter_branch();
    }
    expect_close();
    return stmt;
  }

  ForStmt parse_for(int line) {
    ForStmt stmt;
    const bool parenthesized = tokens_.accept(TokenKind::kOpenParen);
    do {
      stmt.targets.push_back(tokens_.expect(TokenKind::kIdentifier, "a loop variable").value);
    } while (tokens_.accept(TokenKind::kComma));
    if (parenthesized) tokens_.expect(TokenKind::kCloseParen, "')'");
    stmt.unpack = parenthesized || stmt.targets.size() > 1;
    if (!tokens_.accept_identifier("in")) {
      tokens_.error("expected 'in' in for loop, found {}", tokens_.describe());
    }
    stmt.iterable = expressions_.expression();
    // `for x in xs if cond` filters the items; it parses as an else-less conditional.
    if (auto* conditional = std::get_if<Conditional>(&stmt.iterable->node);
        conditional != nullptr && conditional->else_value == nullptr) {
      stmt.filter = std::move(conditional->condition);
      stmt.iterable = std::move(conditional->then_value);
    }
    if (tokens_.at_identifier("recursive")) tokens_.error("unsupported recursive for loop");
    expect_close();
    ++loop_depth_;
    stmt.body = parse_body({"else", "endfor"}, "for", line);
    --loop_depth_;
    if (enter_branch() == "else") {
      expect_close();
      stmt.else_body = parse_body({"endfor"}, "for", line);
      enter_branch();
    }
    expect_close();
    return stmt;
  }

  SetStmt parse_set(int line) {
    SetStmt stmt;
    stmt.target = expressions_.expression_sequence();
    check_assignable(*stmt.target);
    if (tokens_.accept(TokenKind::kEquals)) {
      stmt.value = expressions_.expression_sequence();
      expect_close();
      return stmt;
    }
    if (!tokens_.accept(TokenKind::kCloseStatement)) {
      tokens_.error("expected '=' or '%}}' in set, found {}", tokens_.describe());
    }
    stmt.body = parse_isolated_body({"endset"}, "set", line);
    enter_branch();
    expect_close();
    return stmt;
  }

  static void check_assignable(const Expr& target) {
    if (std::holds_alternative<Name>(target.node) ||
        std::holds_alternative<Attribute>(target.node)) {
      return;
    }
    if (const auto* tuple = std::get_if<ListLiteral>(&target.node)) {
      const bool all_names =
          std::all_of(tuple->items.begin(), tuple->items.end(),
                      [](const auto& e) { return std::holds_alternative<Name>(e->node); });
      if (all_names && !tuple->items.empty()) return;
    }
    fail("line {}: cannot assign to this expression; set takes a name, names or ns.attribute",
         target.line);
  }

  MacroStmt parse_macro(int line) {
    MacroStmt stmt;
    stmt.name = tokens_.expect(TokenKind::kIdentifier, "a macro name").value;
    stmt.signature = expressions_.signature();
    expect_close();
    stmt.body = parse_macro_body(stmt.signature, {"endmacro"}, "macro", line);
    enter_branch();
    expect_close();
    return stmt;
  }

  CallBlockStmt parse_call_block(int line) {
    CallBlockStmt stmt;
    if (tokens_.at(TokenKind::kOpenParen)) stmt.caller_signature = expressions_.signature();
    stmt.call = expressions_.unary();
    if (!std::holds_alternative<Call>(stmt.call->node)) {
      tokens_.error("expected a macro call in call block");
    }
    expect_close();
    stmt.body = parse_macro_body(stmt.caller_signature, {"endcall"}, "call", line);
    enter_branch();
    expect_close();
    return stmt;
  }

  FilterBlockStmt parse_filter_block(int line) {
    FilterBlockStmt stmt;
    do {
      stmt.filters.push_back(expressions_.filter_call());
    } while (tokens_.accept(TokenKind::kPipe));
    expect_close();
    stmt.body = parse_isolated_body({"endfilter"}, "filter", line);
    enter_branch();
    expect_close();
    return stmt;
  }

  // Bodies that render into a value: loop control cannot cross them.
  Body parse_isolated_body(std::initializer_list<std::string_view> terminators,
                           std::string_view block, int line) {
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    Body body = parse_body(terminators, block, line);
    loop_depth_ = saved_loop_depth;
    return body;
  }

  Body parse_macro_body(Signature& signature, std::initializer_list<std::string_view> terminators,
                        std::string_view block, int line) {
    expressions_.push_signature(&signature);
    Body body = parse_isolated_body(terminators, block, line);
    expressions_.pop_signature();
    return body;
  }

  void expect_close() { tokens_.expect(TokenKind::kCloseStatement, "'%}'"); }

  TokenStream tokens_;
  ExpressionParser expressions_;
  int loop_depth_ = 0;
  std::vector<std::pair<std::string_view, int>> open_blocks_;  // name and line, innermost last
};

}  // namespace

Body parse_tokens(std::vector<Token> tokens) {
  return StatementParser(std::move(tokens)).parse_template();
}

}  // namespace pagoda::jinja
