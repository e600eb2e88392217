// UTF-8 and Unicode helpers for the tokenizer: code point iteration, lossy decoding of byte
// strings, normalization forms (utf8proc) and the whitespace trimming that tokenizer.json
// components use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

// Decodes the code point at text[pos] and advances pos. Invalid or truncated sequences yield
// U+FFFD and advance by one byte.
char32_t next_code_point(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t code_point);
// The code points of `text`, each as its own UTF-8 string.
std::vector<std::string> split_code_points(std::string_view text);

// Bytes to valid UTF-8: every maximal invalid subpart becomes one U+FFFD (the WHATWG decoder's
// rule, which TextDecoder and Rust's from_utf8_lossy share).
std::string to_valid_utf8(std::string_view bytes);
// Bytes at the end of `bytes` that start a UTF-8 sequence it does not finish (0 to 3).
size_t incomplete_utf8_tail(std::string_view bytes);

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };
std::string unicode_normalize(std::string_view text, NormalizationForm form);
std::string to_lower(std::string_view text);
// Removes every mark (general category M): the StripAccents normalizer, which expects text already
// decomposed.
std::string strip_marks(std::string_view text);

// White space as JavaScript's trim() defines it (the peers and Hugging Face's JS tokenizers use it
// for added tokens' lstrip/rstrip and the Strip normalizer).
bool is_js_whitespace(char32_t code_point);
std::string_view trim_start(std::string_view text);
std::string_view trim_end(std::string_view text);

}  // namespace pagoda
