#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// Oniguruma's classes in PCRE2 terms. A word character is alphabetic, a mark, a decimal digit or a
// connector punctuation; outside brackets Oniguruma adds the Latin-1 digits ², ³, ¹ and ¼–¾.
constexpr std::string_view kOnigWordInClass = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})";
constexpr std::string_view kOnigWord =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}])";
constexpr std::string_view kOnigNonWord =
    R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE}])";
// JavaScript's \s: White_Space without U+0085, plus U+FEFF.
constexpr std::string_view kJsSpaceInClass =
    R"(\t\n\x{0B}\f\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF})";

std::string js_space(bool negated) {
  return std::string(negated ? "[^" : "[") + std::string(kJsSpaceInClass) + "]";
}

// The rewrite of escape `\c`, or "" to keep it as it is.
std::string rewrite_escape(char c, bool in_class, RegexSyntax syntax) {
  if (syntax == RegexSyntax::kJavaScript) {
    switch (c) {
      case 's':
        return in_class ? std::string(kJsSpaceInClass) : js_space(false);
      case 'S':
        if (in_class) fail("\\S inside a character class is not supported");
        return js_space(true);
      case 'd':
        return in_class ? "0-9" : "[0-9]";
      case 'D':
        return in_class ? "" : "[^0-9]";
      case 'w':
        return in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]";
      case 'W':
        return in_class ? "" : "[^A-Za-z0-9_]";
      default:
        return "";
    }
  }
  switch (c) {
    case 's':
      return R"(\p{White_Space})";
    case 'S':
      return R"(\P{White_Space})";
    case 'd':
      return R"(\p{Nd})";
    case 'D':
      return R"(\P{Nd})";
    case 'h':
      return in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]";
    case 'H':
      if (in_class) fail("\\H inside a character class is not supported");
      return "[^0-9A-Fa-f]";
    case 'w':
      return in_class ? std::string(kOnigWordInClass) : std::string(kOnigWord);
    case 'W':
      if (in_class) fail("\\W inside a character class is not supported");
      return std::string(kOnigNonWord);
    case 'b':
      if (in_class) return "";  // a backspace inside brackets
      return fmt::format("(?:(?<!{0})(?={0})|(?<={0})(?!{0}))", kOnigWord);
    case 'B':
      if (in_class) return "";
      return fmt::format("(?:(?<!{0})(?!{0})|(?<={0})(?={0}))", kOnigWord);
    default:
      return "";
  }
}

}  // namespace

std::string translate_pattern(std::string_view pattern, RegexSyntax syntax) {
  if (syntax == RegexSyntax::kLiteral) return std::string(pattern);
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const std::string rewritten = rewrite_escape(pattern[i + 1], in_class, syntax);
      out += rewritten.empty() ? std::string(pattern.substr(i, 2)) : rewritten;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // a POSIX class: copied whole
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, RegexSyntax syntax) : compiled_(new Compiled) {
  const std::string translated = translate_pattern(pattern, syntax);
  uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK;
  options |= syntax == RegexSyntax::kLiteral ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE;
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                  translated.size(), options, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("regex '{}' does not compile (at offset {}): {}", pattern, offset,
         reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("regex match failed with PCRE2 error {}", rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    matches.emplace_back(ovector[0], ovector[1]);
    if (ovector[1] > ovector[0]) {
      start = ovector[1];
    } else {
      if (ovector[1] >= text.size()) break;
      size_t next = ovector[1];
      next_code_point(text, next);
      start = next;
    }
  }
  return matches;
}

std::string Regex::replace_all(std::string_view text, std::string_view replacement) const {
  std::string out;
  size_t copied = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text.substr(copied, begin - copied));
    out.append(replacement);
    copied = end;
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace pagoda
