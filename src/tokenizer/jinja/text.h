// UTF-8 and number-formatting helpers shared by the Jinja lexer and runtime. Whitespace follows
// JavaScript's definition (`\s`, String.prototype.trim) because chat templates are checked against
// the JavaScript renderer that most tooling uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace pagoda::jinja {

// The code point starting at `pos` and its length in bytes (invalid bytes: U+FFFD, length 1).
inline char32_t decode_utf8(std::string_view text, size_t pos, size_t* length) {
  size_t end = pos;
  const char32_t code_point = next_code_point(text, end);
  *length = end - pos;
  return code_point;
}

// Length of the JavaScript whitespace run starting at `pos` (0 if none).
size_t js_space_length(std::string_view text, size_t pos);
size_t count_code_points(std::string_view text);

inline bool is_ascii_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
std::string ascii_lower(std::string_view text);
std::string ascii_upper(std::string_view text);

// JavaScript's Number.prototype.toString(): shortest round-trip digits, exponent outside
// [1e-7, 1e21).
std::string format_js_number(double value);

// JavaScript's parseInt and parseFloat: leading whitespace and a sign, then the longest number
// prefix; nullopt when there is none (or the integer overflows).
std::optional<int64_t> parse_int_prefix(std::string_view text, int base);
std::optional<double> parse_float_prefix(std::string_view text);

// HTML escaping as markupsafe does it, and unescaping of the common entities.
std::string html_escape(std::string_view text);
std::string html_unescape(std::string_view text);

// JSON string literal with JSON.stringify's escapes; `ensure_ascii` escapes everything from
// U+007F up as \uXXXX (UTF-16 units).
std::string json_quote(std::string_view text, bool ensure_ascii);

}  // namespace pagoda::jinja
