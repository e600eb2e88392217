#include "tokenizer/jinja/expr_parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>
#include <variant>

#include "tokenizer/jinja/builtins.h"

namespace pagoda::jinja {

// ---- TokenStream ----

bool TokenStream::at_statement(std::initializer_list<std::string_view> names) const {
  return at(TokenKind::kOpenStatement) && has(1) && peek(1).kind == TokenKind::kIdentifier &&
         std::find(names.begin(), names.end(), peek(1).value) != names.end();
}

bool TokenStream::accept(TokenKind kind) {
  if (!at(kind)) return false;
  ++pos_;
  return true;
}

bool TokenStream::accept_identifier(std::string_view name) {
  if (!at_identifier(name)) return false;
  ++pos_;
  return true;
}

const Token& TokenStream::expect(TokenKind kind, std::string_view what) {
  if (!at(kind)) error("expected {}, found {}", what, describe());
  return tokens_[pos_++];
}

int TokenStream::line() const {
  if (tokens_.empty()) return 1;
  return tokens_[std::min(pos_, tokens_.size() - 1)].line;
}

std::string TokenStream::describe() const {
  if (at_end()) return "end of template";
  const Token& token = tokens_[pos_];
  switch (token.kind) {
    case TokenKind::kText:
      return "text";
    case TokenKind::kComment:
      return "comment";
    case TokenKind::kString:
      return fmt::format("string '{}'", token.value);
    default:
      return fmt::format("'{}'", token.value);
  }
}

TokenStream::Nested::Nested(TokenStream& stream) : stream_(stream) {
  if (++stream_.nesting_ > kMaxNesting) {
    --stream_.nesting_;
    stream_.error("template nests deeper than {} levels", kMaxNesting);
  }
}

// ---- ExpressionParser ----

namespace {

int depth_of(const ExprPtr& e) {
  return e ? e->depth : 0;
}

int depth_of(const ArgList& args) {
  int depth = std::max(depth_of(args.positional_spread), depth_of(args.keyword_spread));
  for (const auto& e : args.positional)
    depth = std::max(depth, depth_of(e));
  for (const auto& [name, e] : args.keyword)
    depth = std::max(depth, depth_of(e));
  return depth;
}

// Height of the tallest child of a node.
struct ChildDepth {
  int operator()(const Literal&) const { return 0; }
  int operator()(const Name&) const { return 0; }
  int operator()(const ListLiteral& n) const {
    int depth = 0;
    for (const auto& e : n.items)
      depth = std::max(depth, depth_of(e));
    return depth;
  }
  int operator()(const DictLiteral& n) const {
    int depth = 0;
    for (const auto& [k, v] : n.items)
      depth = std::max({depth, depth_of(k), depth_of(v)});
    return depth;
  }
  int operator()(const Attribute& n) const { return depth_of(n.object); }
  int operator()(const Subscript& n) const {
    return std::max(depth_of(n.object), depth_of(n.index));
  }
  int operator()(const Slice& n) const {
    return std::max({depth_of(n.object), depth_of(n.start), depth_of(n.stop), depth_of(n.step)});
  }
  int operator()(const Call& n) const { return std::max(depth_of(n.callee), depth_of(n.args)); }
  int operator()(const Filter& n) const {
    return std::max(depth_of(n.operand), depth_of(n.filter.args));
  }
  int operator()(const Test& n) const { return std::max(depth_of(n.operand), depth_of(n.args)); }
  int operator()(const Unary& n) const { return depth_of(n.operand); }
  int operator()(const Binary& n) const { return std::max(depth_of(n.left), depth_of(n.right)); }
  int operator()(const Conditional& n) const {
    return std::max({depth_of(n.condition), depth_of(n.then_value), depth_of(n.else_value)});
  }
};

// The operator a symbol or keyword token stands for.
BinaryOp binary_op_of(std::string_view symbol) {
  static constexpr std::pair<std::string_view, BinaryOp> kOps[] = {
      {"+", BinaryOp::kAdd},           {"-", BinaryOp::kSubtract},   {"~", BinaryOp::kConcat},
      {"*", BinaryOp::kMultiply},      {"/", BinaryOp::kDivide},     {"//", BinaryOp::kFloorDivide},
      {"%", BinaryOp::kModulo},        {"==", BinaryOp::kEqual},     {"!=", BinaryOp::kNotEqual},
      {"<", BinaryOp::kLess},          {"<=", BinaryOp::kLessEqual}, {">", BinaryOp::kGreater},
      {">=", BinaryOp::kGreaterEqual}, {"in", BinaryOp::kIn},
  };
  for (const auto& [text, op] : kOps) {
    if (text == symbol) return op;
  }
  throw InternalError(fmt::format("no binary operator '{}'", symbol));
}

Value number_literal(const Token& token) {
  const std::string& text = token.value;
  if (text.find('.') != std::string::npos) return Value::number(std::strtod(text.c_str(), nullptr));
  int64_t value = 0;
  const char* begin = text.data() + (text[0] == '+');
  const auto result = std::from_chars(begin, text.data() + text.size(), value);
  if (result.ec != std::errc()) fail("line {}: integer literal {} is too large", token.line, text);
  return Value::integer(value);
}

}  // namespace

template <typename Node>
ExprPtr ExpressionParser::make(int line, Node node) {
  auto expr = std::make_unique<Expr>(Expr{line, std::move(node)});
  expr->depth = 1 + std::visit(ChildDepth{}, expr->node);
  if (expr->depth > kMaxNesting) {
    fail("line {}: expression nests deeper than {} levels", line, kMaxNesting);
  }
  return expr;
}

ExprPtr ExpressionParser::expression() {
  TokenStream::Nested nested(tokens_);
  ExprPtr value = logical_or();
  if (!tokens_.at_identifier("if")) return value;
  const int line = tokens_.next().line;
  ExprPtr condition = logical_or();
  ExprPtr else_value = tokens_.accept_identifier("else") ? expression() : nullptr;
  return make(line, Conditional{std::move(condition), std::move(value), std::move(else_value)});
}

ExprPtr ExpressionParser::expression_sequence() {
  const int line = tokens_.line();
  ExprPtr first = expression();
  if (!tokens_.at(TokenKind::kComma)) return first;
  ListLiteral tuple;
  tuple.items.push_back(std::move(first));
  while (tokens_.accept(TokenKind::kComma) && !tokens_.at(TokenKind::kCloseParen)) {
    tuple.items.push_back(expression());
  }
  return make(line, std::move(tuple));
}

ExprPtr ExpressionParser::binary(BinaryOp op, ExprPtr left,
                                 ExprPtr (ExpressionParser::*parse_right)()) {
  const int line = tokens_.next().line;
  ExprPtr right = (this->*parse_right)();
  return make(line, Binary{op, std::move(left), std::move(right)});
}

ExprPtr ExpressionParser::logical_or() {
  ExprPtr left = logical_and();
  while (tokens_.at_identifier("or"))
    left = binary(BinaryOp::kOr, std::move(left), &ExpressionParser::logical_and);
  return left;
}

ExprPtr ExpressionParser::logical_and() {
  ExprPtr left = logical_not();
  while (tokens_.at_identifier("and"))
    left = binary(BinaryOp::kAnd, std::move(left), &ExpressionParser::logical_not);
  return left;
}

ExprPtr ExpressionParser::logical_not() {
  if (!tokens_.at_identifier("not")) return comparison();
  TokenStream::Nested nested(tokens_);
  const int line = tokens_.next().line;
  return make(line, Unary{UnaryOp::kNot, logical_not()});
}

// Membership shares the precedence of comparisons; chains associate to the left.
ExprPtr ExpressionParser::comparison() {
  ExprPtr left = additive();
  while (true) {
    if (tokens_.at_identifier("not") && tokens_.has(1) &&
        tokens_.peek(1).kind == TokenKind::kIdentifier && tokens_.peek(1).value == "in") {
      tokens_.skip(1);
      left = binary(BinaryOp::kNotIn, std::move(left), &ExpressionParser::additive);
    } else if (tokens_.at_identifier("in") || tokens_.at(TokenKind::kComparison)) {
      left =
          binary(binary_op_of(tokens_.peek().value), std::move(left), &ExpressionParser::additive);
    } else {
      return left;
    }
  }
}

ExprPtr ExpressionParser::additive() {
  ExprPtr left = multiplicative();
  while (tokens_.at(TokenKind::kAdditive)) {
    left = binary(binary_op_of(tokens_.peek().value), std::move(left),
                  &ExpressionParser::multiplicative);
  }
  return left;
}

ExprPtr ExpressionParser::multiplicative() {
  ExprPtr left = power();
  while (tokens_.at(TokenKind::kMultiplicative)) {
    left = binary(binary_op_of(tokens_.peek().value), std::move(left), &ExpressionParser::power);
  }
  return left;
}

// Left-associative, as in Jinja: 2 ** 3 ** 2 == 64.
ExprPtr ExpressionParser::power() {
  ExprPtr left = test();
  while (tokens_.at(TokenKind::kPower))
    left = binary(BinaryOp::kPower, std::move(left), &ExpressionParser::test);
  return left;
}

ExprPtr ExpressionParser::test() {
  ExprPtr operand = filter();
  while (tokens_.at_identifier("is")) {
    const int line = tokens_.next().line;
    Test node;
    node.negated = tokens_.accept_identifier("not");
    node.name = tokens_.expect(TokenKind::kIdentifier, "a test name").value;
    if (!has_test(node.name)) tokens_.error("unsupported test '{}'", node.name);
    if (tokens_.at(TokenKind::kOpenParen)) {
      node.args = args();
    } else if (starts_test_argument()) {
      node.args.positional.push_back(postfix(primary()));
    }
    node.operand = std::move(operand);
    operand = make(line, std::move(node));
  }
  return operand;
}

// Jinja's `x is divisibleby 3` form: one argument without parentheses.
bool ExpressionParser::starts_test_argument() const {
  if (tokens_.at_end()) return false;
  const Token& token = tokens_.peek();
  switch (token.kind) {
    case TokenKind::kNumber:
    case TokenKind::kString:
    case TokenKind::kOpenBracket:
    case TokenKind::kOpenBrace:
      return true;
    case TokenKind::kIdentifier: {
      static constexpr std::string_view kKeywords[] = {"else", "or", "and", "if",
                                                       "is",   "in", "not"};
      return std::find(std::begin(kKeywords), std::end(kKeywords), token.value) ==
             std::end(kKeywords);
    }
    default:
      return false;
  }
}

ExprPtr ExpressionParser::filter() {
  ExprPtr operand = unary();
  while (tokens_.at(TokenKind::kPipe)) {
    const int line = tokens_.next().line;
    operand = make(line, Filter{std::move(operand), filter_call()});
  }
  return operand;
}

FilterCall ExpressionParser::filter_call() {
  FilterCall call;
  const Token& name = tokens_.expect(TokenKind::kIdentifier, "a filter name");
  call.name = name.value;
  if (!has_filter(call.name)) fail("line {}: unsupported filter '{}'", name.line, call.name);
  if (tokens_.at(TokenKind::kOpenParen)) call.args = args();
  return call;
}

ExprPtr ExpressionParser::unary() {
  TokenStream::Nested nested(tokens_);
  if ((tokens_.at(TokenKind::kUnary) || tokens_.at(TokenKind::kAdditive)) &&
      (tokens_.peek().value == "-" || tokens_.peek().value == "+")) {
    const Token& sign = tokens_.next();
    const UnaryOp op = sign.value == "-" ? UnaryOp::kNegate : UnaryOp::kPlus;
    return make(sign.line, Unary{op, unary()});
  }
  return postfix(primary());
}

// Attribute access, subscripts, slices and calls.
ExprPtr ExpressionParser::postfix(ExprPtr object) {
  while (true) {
    const int line = tokens_.line();
    if (tokens_.accept(TokenKind::kDot)) {
      if (tokens_.at(TokenKind::kNumber) &&
          tokens_.peek().value.find_first_not_of("0123456789") == std::string::npos) {
        ExprPtr index = primary();
        object = make(line, Subscript{std::move(object), std::move(index)});
      } else {
        std::string name = tokens_.expect(TokenKind::kIdentifier, "an attribute name").value;
        object = make(line, Attribute{std::move(object), std::move(name)});
      }
    } else if (tokens_.accept(TokenKind::kOpenBracket)) {
      object = subscript(std::move(object), line);
    } else if (tokens_.at(TokenKind::kOpenParen)) {
      object = make(line, Call{std::move(object), args()});
    } else {
      return object;
    }
  }
}

ExprPtr ExpressionParser::subscript(ExprPtr object, int line) {
  std::vector<ExprPtr> parts;
  bool is_slice = false;
  while (!tokens_.accept(TokenKind::kCloseBracket)) {
    if (tokens_.at_end()) tokens_.error("unclosed '['");
    if (tokens_.accept(TokenKind::kColon)) {
      parts.push_back(nullptr);
      is_slice = true;
      continue;
    }
    parts.push_back(expression());
    if (tokens_.accept(TokenKind::kColon)) {
      is_slice = true;
    } else if (!tokens_.at(TokenKind::kCloseBracket)) {
      tokens_.error("expected ':' or ']' in subscript, found {}", tokens_.describe());
    }
  }
  if (parts.empty()) fail("line {}: empty subscript '[]'", line);
  if (!is_slice) return make(line, Subscript{std::move(object), std::move(parts[0])});
  if (parts.size() > 3) fail("line {}: a slice takes at most three parts", line);
  parts.resize(3);
  return make(line, Slice{std::move(object), std::move(parts[0]), std::move(parts[1]),
                          std::move(parts[2])});
}

ArgList ExpressionParser::args() {
  ArgList list;
  tokens_.expect(TokenKind::kOpenParen, "'('");
  while (!tokens_.accept(TokenKind::kCloseParen)) {
    if (tokens_.accept(TokenKind::kPower)) {
      list.keyword_spread = expression();
      tokens_.accept(TokenKind::kComma);
      tokens_.expect(TokenKind::kCloseParen, "')' after the '**' argument");
      break;
    }
    if (tokens_.at(TokenKind::kMultiplicative) && tokens_.peek().value == "*") {
      tokens_.skip(1);
      if (list.positional_spread) tokens_.error("only one '*' argument is allowed");
      list.positional_spread = expression();
    } else {
      ExprPtr value = expression();
      if (tokens_.accept(TokenKind::kEquals)) {
        const auto* keyword = std::get_if<Name>(&value->node);
        if (keyword == nullptr) tokens_.error("keyword argument name must be an identifier");
        if (std::any_of(list.keyword.begin(), list.keyword.end(),
                        [&](const auto& k) { return k.first == keyword->name; })) {
          tokens_.error("duplicate keyword argument '{}'", keyword->name);
        }
        list.keyword.emplace_back(keyword->name, expression());
      } else if (!list.keyword.empty() || list.positional_spread) {
        tokens_.error("positional argument follows keyword or '*' argument");
      } else {
        list.positional.push_back(std::move(value));
      }
    }
    if (!tokens_.accept(TokenKind::kComma) && !tokens_.at(TokenKind::kCloseParen)) {
      tokens_.error("expected ',' or ')' in argument list, found {}", tokens_.describe());
    }
  }
  return list;
}

ExprPtr ExpressionParser::primary() {
  if (tokens_.at_end()) tokens_.error("unexpected end of template in expression");
  const Token& token = tokens_.next();
  switch (token.kind) {
    case TokenKind::kNumber:
      return make(token.line, Literal{number_literal(token)});
    case TokenKind::kString: {
      std::string value = token.value;
      while (tokens_.at(TokenKind::kString))
        value += tokens_.next().value;
      return make(token.line, Literal{Value::string(std::move(value))});
    }
    case TokenKind::kIdentifier:
      return name(token);
    case TokenKind::kOpenParen: {
      ExprPtr value = expression_sequence();
      tokens_.expect(TokenKind::kCloseParen, "')'");
      return value;
    }
    case TokenKind::kOpenBracket: {
      ListLiteral list;
      while (!tokens_.accept(TokenKind::kCloseBracket)) {
        list.items.push_back(expression());
        if (!tokens_.accept(TokenKind::kComma) && !tokens_.at(TokenKind::kCloseBracket)) {
          tokens_.error("expected ',' or ']' in list, found {}", tokens_.describe());
        }
      }
      return make(token.line, std::move(list));
    }
    case TokenKind::kOpenBrace: {
      DictLiteral dict;
      while (!tokens_.accept(TokenKind::kCloseBrace)) {
        ExprPtr key = expression();
        tokens_.expect(TokenKind::kColon, "':' in dict literal");
        dict.items.emplace_back(std::move(key), expression());
        if (!tokens_.accept(TokenKind::kComma) && !tokens_.at(TokenKind::kCloseBrace)) {
          tokens_.error("expected ',' or '}}' in dict, found {}", tokens_.describe());
        }
      }
      return make(token.line, std::move(dict));
    }
    default:
      fail("line {}: unexpected '{}' in expression", token.line, token.value);
  }
}

ExprPtr ExpressionParser::name(const Token& token) {
  const std::string& name = token.value;
  if (name == "true" || name == "True") return make(token.line, Literal{Value::boolean(true)});
  if (name == "false" || name == "False") return make(token.line, Literal{Value::boolean(false)});
  if (name == "none" || name == "None") return make(token.line, Literal{Value::none()});
  if ((name == "varargs" || name == "kwargs") && !signatures_.empty()) {
    Signature& signature = *signatures_.back();
    const bool is_param = std::any_of(signature.params.begin(), signature.params.end(),
                                      [&](const auto& p) { return p.first == name; });
    if (!is_param) (name == "varargs" ? signature.reads_varargs : signature.reads_kwargs) = true;
  }
  return make(token.line, Name{name});
}

Signature ExpressionParser::signature() {
  Signature signature;
  tokens_.expect(TokenKind::kOpenParen, "'('");
  while (!tokens_.accept(TokenKind::kCloseParen)) {
    std::string name = tokens_.expect(TokenKind::kIdentifier, "a parameter name").value;
    for (const auto& [existing, unused] : signature.params) {
      if (existing == name) tokens_.error("duplicate parameter '{}'", name);
    }
    ExprPtr default_value;
    if (tokens_.accept(TokenKind::kEquals)) {
      default_value = expression();
    } else if (!signature.params.empty() && signature.params.back().second != nullptr) {
      tokens_.error("parameter '{}' without a default follows one with a default", name);
    }
    signature.params.emplace_back(std::move(name), std::move(default_value));
    if (!tokens_.accept(TokenKind::kComma) && !tokens_.at(TokenKind::kCloseParen)) {
      tokens_.error("expected ',' or ')' in parameter list, found {}", tokens_.describe());
    }
  }
  return signature;
}

}  // namespace pagoda::jinja
