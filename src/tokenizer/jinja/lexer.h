// Turns template source into tokens, applying the whitespace rules chat templates are rendered
// with (trim_blocks, lstrip_blocks, `-` markers) and removing `{% generation %}` tags.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

enum class TokenKind {
  kText,
  kComment,
  kOpenStatement,    // {%
  kCloseStatement,   // %}
  kOpenExpression,   // {{
  kCloseExpression,  // }}
  kIdentifier,       // names, keywords and true/false/none alike
  kNumber,           // digits, with a sign when it follows an operator
  kString,           // value with escapes resolved
  kEquals,
  kOpenParen,
  kCloseParen,
  kOpenBracket,
  kCloseBracket,
  kOpenBrace,
  kCloseBrace,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // == != < > <= >=
  kUnary,           // a lone + or - in operand position
};

struct Token {
  TokenKind kind;
  std::string value;
  int line;  // 1-based, in the original source
};

// Throws Error naming the line for malformed input (unterminated string, comment or tag, bad
// escape, unexpected character).
std::vector<Token> tokenize(std::string_view source);

}  // namespace pagoda::jinja
