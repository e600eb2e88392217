#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/error.h"
#include "tokenizer/jinja/text.h"

namespace pagoda::jinja {
namespace {

// Text with the original line of every byte, so errors point at the source after whitespace
// handling has removed parts of it.
struct MappedText {
  std::string text;
  std::vector<int> lines;

  void append(const MappedText& from, size_t pos, size_t count) {
    text.append(from.text, pos, count);
    lines.insert(lines.end(), from.lines.begin() + pos, from.lines.begin() + pos + count);
  }
};

bool is_line_terminator(char32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x2028 || cp == 0x2029;
}

// lstrip_blocks: spaces and tabs before a `{%`, `{#` (or `{-`) that starts a line are dropped.
MappedText lstrip_blocks(const MappedText& in) {
  const std::string& t = in.text;
  MappedText out;
  bool line_start = true;
  for (size_t i = 0; i < t.size();) {
    if (line_start) {
      size_t j = i;
      while (j < t.size() && (t[j] == ' ' || t[j] == '\t'))
        ++j;
      if (j + 1 < t.size() && t[j] == '{' &&
          (t[j + 1] == '#' || t[j + 1] == '%' || t[j + 1] == '-')) {
        i = j;
      }
    }
    size_t length = 0;
    line_start = is_line_terminator(decode_utf8(t, i, &length));
    out.append(in, i, length);
    i += length;
  }
  return out;
}

// trim_blocks: the newline right after `%}`, `#}` (or `-}`) is dropped.
MappedText trim_blocks(const MappedText& in) {
  const std::string& t = in.text;
  MappedText out;
  for (size_t i = 0; i < t.size(); ++i) {
    const bool tag_end = (t[i] == '#' || t[i] == '%' || t[i] == '-') && i + 2 < t.size() &&
                         t[i + 1] == '}' && t[i + 2] == '\n';
    out.append(in, i, tag_end ? 2 : 1);
    if (tag_end) i += 2;
  }
  return out;
}

// Matches `{%-? generation -?%}` or its `endgeneration` at `pos`; sets the end and `-` markers.
bool match_generation_tag(std::string_view t, size_t pos, size_t* end, bool* lstrip, bool* rstrip) {
  size_t p = pos + 2;
  *lstrip = p < t.size() && t[p] == '-';
  p += *lstrip;
  p += js_space_length(t, p);
  if (t.substr(p, 13) == "endgeneration") p += 3;
  if (t.substr(p, 10) != "generation") return false;
  p += 10;
  p += js_space_length(t, p);
  *rstrip = p < t.size() && t[p] == '-';
  p += *rstrip;
  if (t.substr(p, 2) != "%}") return false;
  *end = p + 2;
  return true;
}

// The transformers-specific `{% generation %}` markers render their body, so the tags are removed
// with the whitespace around them unless a `-` says to drop it.
MappedText remove_generation_tags(const MappedText& in) {
  const std::string_view t = in.text;
  MappedText out;
  size_t copied = 0;
  for (size_t i = t.find("{%"); i != std::string_view::npos; i = t.find("{%", i + 2)) {
    size_t end = 0;
    bool lstrip = false, rstrip = false;
    if (!match_generation_tag(t, i, &end, &lstrip, &rstrip)) continue;
    const size_t before = copied + trim_end(t.substr(copied, i - copied)).size();
    const size_t after = end + js_space_length(t, end);
    out.append(in, copied, before - copied);
    if (!lstrip) out.append(in, before, i - before);
    if (!rstrip) out.append(in, end, after - end);
    copied = after;
    i = after - 2;
  }
  out.append(in, copied, t.size() - copied);
  return out;
}

MappedText preprocess(std::string_view source) {
  MappedText mapped;
  int line = 1;
  for (char c : source) {
    mapped.text += c;
    mapped.lines.push_back(line);
    line += c == '\n';
  }
  // A single trailing newline is not part of the output.
  if (!mapped.text.empty() && mapped.text.back() == '\n') {
    mapped.text.pop_back();
    mapped.lines.pop_back();
  }
  return remove_generation_tags(trim_blocks(lstrip_blocks(mapped)));
}

constexpr std::array<std::pair<std::string_view, TokenKind>, 29> kSymbols = {{
    {"{%", TokenKind::kOpenStatement},  {"%}", TokenKind::kCloseStatement},
    {"{{", TokenKind::kOpenExpression}, {"}}", TokenKind::kCloseExpression},
    {"(", TokenKind::kOpenParen},       {")", TokenKind::kCloseParen},
    {"{", TokenKind::kOpenBrace},       {"}", TokenKind::kCloseBrace},
    {"[", TokenKind::kOpenBracket},     {"]", TokenKind::kCloseBracket},
    {",", TokenKind::kComma},           {".", TokenKind::kDot},
    {":", TokenKind::kColon},           {"|", TokenKind::kPipe},
    {"<=", TokenKind::kComparison},     {">=", TokenKind::kComparison},
    {"==", TokenKind::kComparison},     {"!=", TokenKind::kComparison},
    {"<", TokenKind::kComparison},      {">", TokenKind::kComparison},
    {"+", TokenKind::kAdditive},        {"-", TokenKind::kAdditive},
    {"~", TokenKind::kAdditive},        {"**", TokenKind::kPower},
    {"*", TokenKind::kMultiplicative},  {"//", TokenKind::kMultiplicative},
    {"/", TokenKind::kMultiplicative},  {"%", TokenKind::kMultiplicative},
    {"=", TokenKind::kEquals},
}};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  explicit Lexer(MappedText source) : source_(std::move(source)), src_(source_.text) {}

  std::vector<Token> run() {
    while (pos_ < src_.size())
      step();
    return std::move(tokens_);
  }

 private:
  void step() {
    const bool after_tag = tokens_.empty() || last_is(TokenKind::kCloseStatement) ||
                           last_is(TokenKind::kCloseExpression) || last_is(TokenKind::kComment);
    if (after_tag && read_text()) return;
    if (at("{#")) return read_comment();
    if (at("{%-") || at("{{-")) {
      strip_trailing_whitespace();
      const bool statement = src_[pos_ + 1] == '%';
      push(statement ? TokenKind::kOpenStatement : TokenKind::kOpenExpression,
           statement ? "{%" : "{{", pos_);
      if (!statement) curly_depth_ = 0;
      pos_ += 3;
      return;
    }
    pos_ += js_space_length(src_, pos_);
    if (pos_ >= src_.size()) return;
    if (at("-%}") || at("-}}")) {
      const bool statement = src_[pos_ + 1] == '%';
      push(statement ? TokenKind::kCloseStatement : TokenKind::kCloseExpression,
           statement ? "%}" : "}}", pos_);
      pos_ += 3;
      pos_ += js_space_length(src_, pos_);
      return;
    }
    const char c = src_[pos_];
    if ((c == '-' || c == '+') && !after_operand()) return read_signed();
    if (read_symbol()) return;
    if (c == '\'' || c == '"') return read_string(c);
    if (is_digit(c)) return read_number();
    if (is_ascii_word(c)) {
      const size_t start = pos_;
      while (pos_ < src_.size() && is_ascii_word(src_[pos_]))
        ++pos_;
      return push(TokenKind::kIdentifier, src_.substr(start, pos_ - start), start);
    }
    size_t length = 0;
    decode_utf8(src_, pos_, &length);
    error("unexpected character '{}'", src_.substr(pos_, length));
  }

  bool read_text() {
    const size_t start = pos_;
    while (pos_ < src_.size() &&
           !(src_[pos_] == '{' && pos_ + 1 < src_.size() &&
             (src_[pos_ + 1] == '%' || src_[pos_ + 1] == '{' || src_[pos_ + 1] == '#'))) {
      ++pos_;
    }
    if (pos_ == start) return false;
    push(TokenKind::kText, src_.substr(start, pos_ - start), start);
    return true;
  }

  void read_comment() {
    const size_t start = pos_;
    pos_ += 2;
    const bool strip_before = pos_ < src_.size() && src_[pos_] == '-';
    pos_ += strip_before;
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) error_at(start, "unterminated comment");
    std::string text = src_.substr(pos_, close - pos_);
    const bool strip_after = !text.empty() && text.back() == '-';
    if (strip_after) text.pop_back();
    if (strip_before) strip_trailing_whitespace();
    push(TokenKind::kComment, std::move(text), start);
    pos_ = close + 2;
    if (strip_after) pos_ += js_space_length(src_, pos_);
  }

  // A sign in operand position: part of a number literal, or a unary operator.
  void read_signed() {
    const size_t start = pos_++;
    std::string number = read_digits();
    if (!number.empty() && at(".") && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1])) {
      ++pos_;
      number += "." + read_digits();
    }
    push(number.empty() ? TokenKind::kUnary : TokenKind::kNumber, src_[start] + number, start);
  }

  bool read_symbol() {
    for (const auto& [symbol, kind] : kSymbols) {
      if (symbol == "}}" && curly_depth_ > 0) continue;
      if (!at(symbol)) continue;
      if (kind == TokenKind::kOpenExpression) curly_depth_ = 0;
      if (kind == TokenKind::kOpenBrace) ++curly_depth_;
      if (kind == TokenKind::kCloseBrace) --curly_depth_;
      push(kind, std::string(symbol), pos_);
      pos_ += symbol.size();
      return true;
    }
    return false;
  }

  void read_number() {
    const size_t start = pos_;
    std::string number = read_digits();
    // `x.0.1` indexes twice; it is not the float 0.1.
    if (!last_is(TokenKind::kDot) && at(".") && pos_ + 1 < src_.size() &&
        is_digit(src_[pos_ + 1])) {
      ++pos_;
      number += "." + read_digits();
    }
    push(TokenKind::kNumber, std::move(number), start);
  }

  std::string read_digits() {
    const size_t start = pos_;
    while (pos_ < src_.size() && is_digit(src_[pos_]))
      ++pos_;
    return src_.substr(start, pos_ - start);
  }

  void read_string(char quote) {
    const size_t start = pos_++;
    std::string value;
    char32_t high_surrogate = 0;
    while (true) {
      if (pos_ >= src_.size()) error_at(start, "unterminated string literal");
      const char c = src_[pos_];
      if (c == quote) break;
      if (c != '\\') {
        flush_surrogate(value, high_surrogate);
        value += c;
        ++pos_;
        continue;
      }
      if (++pos_ >= src_.size()) error_at(start, "unterminated string literal");
      const char escaped = src_[pos_++];
      if (escaped == 'x' || escaped == 'u') {
        const char32_t unit = read_hex(escaped == 'x' ? 2 : 4, escaped);
        if (unit >= 0xDC00 && unit <= 0xDFFF && high_surrogate != 0) {
          append_utf8(value, 0x10000 + ((high_surrogate - 0xD800) << 10) + (unit - 0xDC00));
          high_surrogate = 0;
          continue;
        }
        flush_surrogate(value, high_surrogate);
        if (unit >= 0xD800 && unit <= 0xDBFF) {
          high_surrogate = unit;
        } else {
          append_utf8(value, unit >= 0xDC00 && unit <= 0xDFFF ? 0xFFFD : unit);
        }
        continue;
      }
      flush_surrogate(value, high_surrogate);
      const std::string_view escapes = "n\nt\tr\rb\bf\fv\v''\"\"\\\\";
      size_t index = 0;
      while (index < escapes.size() && escapes[index] != escaped)
        index += 2;
      if (index >= escapes.size()) error("unknown escape sequence '\\{}' in string", escaped);
      value += escapes[index + 1];
    }
    flush_surrogate(value, high_surrogate);
    ++pos_;
    push(TokenKind::kString, std::move(value), start);
  }

  char32_t read_hex(size_t digits, char escape) {
    const std::string hex = src_.substr(pos_, digits);
    const bool valid = hex.size() == digits && std::all_of(hex.begin(), hex.end(), [](char h) {
                         return is_digit(h) || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F');
                       });
    if (!valid) error("invalid escape sequence '\\{}{}' in string", escape, hex);
    pos_ += digits;
    return static_cast<char32_t>(std::stoul(hex, nullptr, 16));
  }

  // A lone UTF-16 surrogate cannot be encoded in UTF-8; it becomes U+FFFD.
  static void flush_surrogate(std::string& value, char32_t& high_surrogate) {
    if (high_surrogate != 0) append_utf8(value, 0xFFFD);
    high_surrogate = 0;
  }

  // `{%-`, `{{-` and `{#-` strip the whitespace at the end of the preceding text.
  void strip_trailing_whitespace() {
    if (!last_is(TokenKind::kText)) return;
    std::string& text = tokens_.back().value;
    text.resize(trim_end(text).size());
    if (text.empty()) tokens_.pop_back();
  }

  bool after_operand() const {
    return last_is(TokenKind::kIdentifier) || last_is(TokenKind::kNumber) ||
           last_is(TokenKind::kString) || last_is(TokenKind::kCloseParen) ||
           last_is(TokenKind::kCloseBracket);
  }

  bool last_is(TokenKind kind) const { return !tokens_.empty() && tokens_.back().kind == kind; }
  bool at(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }

  void push(TokenKind kind, std::string value, size_t start) {
    tokens_.push_back(Token{kind, std::move(value), line_at(start)});
  }

  int line_at(size_t pos) const {
    if (source_.lines.empty()) return 1;
    return source_.lines[std::min(pos, source_.lines.size() - 1)];
  }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    error_at(pos_, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  [[noreturn]] void error_at(size_t pos, fmt::format_string<Args...> format, Args&&... args) const {
    fail("line {}: {}", line_at(pos), fmt::format(format, std::forward<Args>(args)...));
  }

  MappedText source_;
  const std::string& src_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(preprocess(source)).run();
}

}  // namespace pagoda::jinja
