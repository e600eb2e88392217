// Regular expressions for tokenizer.json patterns, on PCRE2 (UTF and UCP, JIT-compiled).
//
// Patterns in tokenizer.json are written for Oniguruma, the engine of Hugging Face's Rust library.
// `onig_pattern` rewrites the constructs whose meaning differs in PCRE2 (\s, \d, \w, \h, \b and
// their negations) into explicit Unicode classes with Oniguruma's meaning; `js_pattern` is for the
// fixed patterns that Hugging Face's JavaScript tokenizers write with JavaScript's \s.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda {

enum class RegexSyntax { kOniguruma, kJavaScript, kLiteral };

class Regex {
 public:
  // Compiles `pattern`; Error naming the pattern and PCRE2's message when it does not compile.
  Regex(std::string_view pattern, RegexSyntax syntax);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Byte ranges [first, second) of the successive non-overlapping matches, empty ones included
  // (the search then moves on by one code point).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  std::string replace_all(std::string_view text, std::string_view replacement) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// The pattern rewritten for PCRE2 (exposed for tests).
std::string translate_pattern(std::string_view pattern, RegexSyntax syntax);

}  // namespace pagoda
