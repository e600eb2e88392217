#include "tokenizer/jinja/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace pagoda::jinja {

size_t js_space_length(std::string_view text, size_t pos) {
  size_t start = pos;
  while (pos < text.size()) {
    size_t length = 0;
    if (!is_js_whitespace(decode_utf8(text, pos, &length))) break;
    pos += length;
  }
  return pos - start;
}

size_t count_code_points(std::string_view text) {
  size_t count = 0;
  for (char c : text)
    count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string ascii_upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string format_js_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  if (value == 0) return "0";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), std::fabs(value),
                              std::chars_format::scientific);
  std::string_view text(buffer, result.ptr - buffer);
  size_t e = text.find('e');
  std::string digits;
  for (char c : text.substr(0, e)) {
    if (c != '.') digits += c;
  }
  // The value is 0.DIGITS * 10^n, as in the ECMAScript Number::toString algorithm.
  const int k = static_cast<int>(digits.size());
  const int n = std::atoi(std::string(text.substr(e + 1)).c_str()) + 1;
  std::string out = value < 0 ? "-" : "";
  if (k <= n && n <= 21) {
    out += digits + std::string(n - k, '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, n) + "." + digits.substr(n);
  } else if (-6 < n && n <= 0) {
    out += "0." + std::string(-n, '0') + digits;
  } else {
    out += digits.substr(0, 1);
    if (k > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{}", n - 1 >= 0 ? "+" : "-", std::abs(n - 1));
  }
  return out;
}

// JavaScript's parseInt: leading whitespace and sign, then as many digits as parse.
std::optional<int64_t> parse_int_prefix(std::string_view text, int base) {
  text = trim_start(text);
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  if (base == 16 && (text.starts_with("0x") || text.starts_with("0X"))) text.remove_prefix(2);
  int64_t value = 0;
  size_t digits = 0;
  for (char c : text) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'z' ? c - 'a' + 10
                      : c >= 'A' && c <= 'Z' ? c - 'A' + 10
                                             : 99;
    if (digit >= base) break;
    if (__builtin_mul_overflow(value, base, &value) ||
        __builtin_add_overflow(value, digit, &value)) {
      return std::nullopt;
    }
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  return negative ? -value : value;
}

// JavaScript's parseFloat: the longest decimal (or Infinity) prefix after leading whitespace.
std::optional<double> parse_float_prefix(std::string_view text) {
  text = trim_start(text);
  size_t pos = 0;
  if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
  if (text.substr(pos).starts_with("Infinity")) {
    return text[0] == '-' ? -INFINITY : INFINITY;
  }
  auto digits = [&] {
    const size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
      ++pos;
    return pos - start;
  };
  size_t mantissa = digits();
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    mantissa += digits();
  }
  if (mantissa == 0) return std::nullopt;
  size_t end = pos;
  if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
    ++pos;
    if (pos < text.size() && (text[pos] == '-' || text[pos] == '+')) ++pos;
    if (digits() > 0) end = pos;
  }
  return std::strtod(std::string(text.substr(0, end)).c_str(), nullptr);
}

std::string html_unescape(std::string_view text) {
  static const std::pair<std::string_view, std::string_view> kEntities[] = {
      {"&amp;", "&"},  {"&lt;", "<"},  {"&gt;", ">"},   {"&quot;", "\""},
      {"&#34;", "\""}, {"&#39;", "'"}, {"&apos;", "'"}, {"&nbsp;", "\u00a0"}};
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const auto entity =
        std::find_if(std::begin(kEntities), std::end(kEntities),
                     [&](const auto& e) { return text.substr(pos).starts_with(e.first); });
    if (entity != std::end(kEntities)) {
      out += entity->second;
      pos += entity->first.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string json_quote(std::string_view text, bool ensure_ascii) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  // Printable ASCII other than the quote and the backslash is copied as it stands, a run at a time.
  const auto plain = [](char c) { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\'; };
  for (size_t pos = 0; pos < text.size();) {
    if (plain(text[pos])) {
      const size_t end = static_cast<size_t>(
          std::find_if_not(text.begin() + static_cast<std::ptrdiff_t>(pos), text.end(), plain) -
          text.begin());
      out.append(text.substr(pos, end - pos));
      pos = end;
      continue;
    }
    size_t length = 0;
    char32_t cp = decode_utf8(text, pos, &length);
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F && cp < 0x10000)) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
        } else if (ensure_ascii && cp >= 0x10000) {
          const char32_t v = cp - 0x10000;
          out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        } else {
          out.append(text.substr(pos, length));
        }
    }
    pos += length;
  }
  return out + "\"";
}

}  // namespace pagoda::jinja
