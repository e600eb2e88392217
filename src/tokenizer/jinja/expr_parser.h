// The token cursor and the expression half of the Jinja parser.
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace pagoda::jinja {

// Deeper nesting than this is refused rather than risking the stack in the parser, the
// interpreter or the tree's destructor.
inline constexpr int kMaxNesting = 256;

// A cursor over the tokens, shared by the statement and expression parsers.
class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  bool at_end() const { return pos_ >= tokens_.size(); }
  bool at(TokenKind kind) const { return !at_end() && tokens_[pos_].kind == kind; }
  bool at_identifier(std::string_view name) const {
    return at(TokenKind::kIdentifier) && tokens_[pos_].value == name;
  }
  // `{% name` for one of `names`.
  bool at_statement(std::initializer_list<std::string_view> names) const;
  // The token `ahead` positions on; the stream must hold it.
  const Token& peek(size_t ahead = 0) const { return tokens_[pos_ + ahead]; }
  bool has(size_t ahead) const { return pos_ + ahead < tokens_.size(); }

  const Token& next() { return tokens_[pos_++]; }
  void skip(size_t count) { pos_ += count; }
  bool accept(TokenKind kind);
  bool accept_identifier(std::string_view name);
  const Token& expect(TokenKind kind, std::string_view what);

  int line() const;
  std::string describe() const;  // the current token, for error messages

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("line {}: {}", line(), fmt::format(format, std::forward<Args>(args)...));
  }

  // Counts the parser's recursion (parentheses, nested blocks) and refuses it past kMaxNesting.
  class Nested {
   public:
    explicit Nested(TokenStream& stream);
    ~Nested() { --stream_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    TokenStream& stream_;
  };

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

// Expressions, with the reference renderer's precedence from lowest: conditional, or, and, not,
// comparisons and membership, + - ~, * / // %, **, is-tests, filters, a leading sign, postfix
// (attributes, subscripts, calls).
class ExpressionParser {
 public:
  explicit ExpressionParser(TokenStream& tokens) : tokens_(tokens) {}

  ExprPtr expression();
  // Comma-separated expressions form a tuple: `set a, b = 1, 2`.
  ExprPtr expression_sequence();
  // An expression without binary operators, tests or filters: a call block's call.
  ExprPtr unary();
  FilterCall filter_call();
  Signature signature();

  // While a macro or call block body is parsed, reads of `varargs` and `kwargs` in it mark its
  // signature.
  void push_signature(Signature* signature) { signatures_.push_back(signature); }
  void pop_signature() { signatures_.pop_back(); }

 private:
  ExprPtr logical_or();
  ExprPtr logical_and();
  ExprPtr logical_not();
  ExprPtr comparison();
  ExprPtr additive();
  ExprPtr multiplicative();
  ExprPtr power();
  ExprPtr test();
  bool starts_test_argument() const;
  ExprPtr filter();
  ExprPtr postfix(ExprPtr object);
  ExprPtr subscript(ExprPtr object, int line);
  ArgList args();
  ExprPtr primary();
  ExprPtr name(const Token& token);
  ExprPtr binary(BinaryOp op, ExprPtr left, ExprPtr (ExpressionParser::*parse_right)());

  template <typename Node>
  ExprPtr make(int line, Node node);

  TokenStream& tokens_;
  std::vector<Signature*> signatures_;  // innermost last
};

}  // namespace pagoda::jinja
