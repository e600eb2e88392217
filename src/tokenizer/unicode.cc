#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace pagoda {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// The UTF-8 sequence starting at bytes[pos], checked against Unicode's table of well-formed
// sequences (no overlongs, no surrogates, nothing past U+10FFFF). When it is ill-formed, `length`
// is its maximal subpart: the bytes one U+FFFD replaces.
struct Sequence {
  size_t length = 1;
  bool complete = true;
  bool truncated = false;  // ill-formed only because the input ended
};

Sequence scan_sequence(std::string_view bytes, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {};
  size_t need = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {.length = 1, .complete = false};
  }
  for (size_t i = 1; i < need; ++i) {
    if (pos + i >= bytes.size()) return {.length = i, .complete = false, .truncated = true};
    const unsigned char b = byte(pos + i);
    if (b < (i == 1 ? low : 0x80) || b > (i == 1 ? high : 0xBF)) {
      return {.length = i, .complete = false};
    }
  }
  return {.length = need};
}

std::string utf8proc_transform(std::string_view text, int options) {
  const std::string valid = to_valid_utf8(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
      static_cast<utf8proc_ssize_t>(valid.size()), &out, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (length < 0) fail("unicode normalization failed: {}", utf8proc_errmsg(length));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(length));
}

}  // namespace

char32_t next_code_point(std::string_view text, size_t& pos) {
  const Sequence sequence = scan_sequence(text, pos);
  if (!sequence.complete) {
    ++pos;
    return kReplacement;
  }
  const size_t length = sequence.length;
  const auto byte = [&](size_t i) { return static_cast<char32_t>(text[pos + i]) & 0xFF; };
  char32_t cp = 0;
  switch (length) {
    case 1:
      cp = byte(0);
      break;
    case 2:
      cp = ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
      break;
    case 3:
      cp = ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
      break;
    default:
      cp = ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) | ((byte(2) & 0x3F) << 6) |
           (byte(3) & 0x3F);
  }
  pos += length;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<std::string> split_code_points(std::string_view text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    next_code_point(text, pos);
    out.emplace_back(text.substr(start, pos - start));
  }
  return out;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const Sequence sequence = scan_sequence(bytes, pos);
    if (sequence.complete) {
      out.append(bytes.substr(pos, sequence.length));
    } else {
      append_utf8(out, kReplacement);
    }
    pos += sequence.length;
  }
  return out;
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const size_t pos = bytes.size() - back;
    const unsigned char b = static_cast<unsigned char>(bytes[pos]);
    if (b < 0x80) return 0;
    if (b >= 0xC0) {
      // A lead byte: the tail is incomplete when only the end of the input stops its sequence.
      return scan_sequence(bytes, pos).truncated ? back : 0;
    }
  }
  return 0;
}

std::string unicode_normalize(std::string_view text, NormalizationForm form) {
  switch (form) {
    case NormalizationForm::kNfc:
      return utf8proc_transform(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalizationForm::kNfd:
      return utf8proc_transform(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalizationForm::kNfkc:
      return utf8proc_transform(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalizationForm::kNfkd:
      return utf8proc_transform(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return std::string(text);
}

std::string to_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(next_code_point(text, pos))));
  }
  return out;
}

std::string strip_marks(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const utf8proc_category_t category =
        utf8proc_category(static_cast<utf8proc_int32_t>(next_code_point(text, pos)));
    if (category != UTF8PROC_CATEGORY_MN && category != UTF8PROC_CATEGORY_MC &&
        category != UTF8PROC_CATEGORY_ME) {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

bool is_js_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view trim_start(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!is_js_whitespace(next_code_point(text, next))) break;
    pos = next;
  }
  return text.substr(pos);
}

std::string_view trim_end(std::string_view text) {
  size_t end = 0;  // the end of the last non-space code point
  for (size_t pos = 0; pos < text.size();) {
    if (!is_js_whitespace(next_code_point(text, pos))) end = pos;
  }
  return text.substr(0, end);
}

}  // namespace pagoda
