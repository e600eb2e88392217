#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <vector>

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

// A Unicode normalization (`options`: DECOMPOSE or COMPOSE, with COMPAT for the K forms), in
// steps that each take time linear in the text. utf8proc_map's canonical ordering swaps
// neighbours, quadratic in a run of combining marks (a 100 KB run took 10 s): here each code point
// is decomposed on its own, each run of marks is sorted stably by combining class, and then
// utf8proc composes.
std::string utf8proc_transform(std::string_view text, int flags) {
  const auto options = static_cast<utf8proc_option_t>(flags);
  const std::string valid = to_valid_utf8(text);
  std::vector<utf8proc_int32_t> points;
  points.reserve(valid.size());
  utf8proc_int32_t piece[32];  // a decomposition is at most 18 code points
  int boundclass = 0;
  for (size_t pos = 0; pos < valid.size();) {
    const auto cp = static_cast<utf8proc_int32_t>(next_code_point(valid, pos));
    const utf8proc_ssize_t n = utf8proc_decompose_char(cp, piece, 32, options, &boundclass);
    if (n < 0 || n > 32)
      fail("unicode normalization failed at U+{:04X}", static_cast<uint32_t>(cp));
    points.insert(points.end(), piece, piece + n);
  }
  const auto combining_class = [](utf8proc_int32_t cp) {
    return utf8proc_get_property(cp)->combining_class;
  };
  for (size_t start = 0; start < points.size();) {
    size_t end = start;
    while (end < points.size() && combining_class(points[end]) != 0)
      ++end;
    if (end - start > 1) {
      std::stable_sort(points.begin() + static_cast<std::ptrdiff_t>(start),
                       points.begin() + static_cast<std::ptrdiff_t>(end),
                       [&](auto a, auto b) { return combining_class(a) < combining_class(b); });
    }
    start = end + 1;
  }
  size_t length = points.size();
  if (options & UTF8PROC_COMPOSE) {
    const utf8proc_ssize_t composed = utf8proc_normalize_utf32(
        points.data(), static_cast<utf8proc_ssize_t>(points.size()),
        static_cast<utf8proc_option_t>(options & (UTF8PROC_COMPOSE | UTF8PROC_STABLE)));
    if (composed < 0) fail("unicode normalization failed: {}", utf8proc_errmsg(composed));
    length = static_cast<size_t>(composed);
  }
  std::string out;
  out.reserve(length);
  for (size_t i = 0; i < length; ++i)
    append_utf8(out, static_cast<char32_t>(points[i]));
  return out;
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
