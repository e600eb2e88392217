#include "core/units.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace pagoda {

std::string format_bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

int64_t parse_byte_size(std::string_view text) {
  const std::string original(text);
  size_t split = 0;
  while (split < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[split])) || text[split] == '.')) {
    ++split;
  }
  double number = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + split, number);
  std::string unit(text.substr(split));
  for (char& c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (split == 0 || error != std::errc() || end != text.data() + split) {
    fail("'{}' is not a size; write e.g. 4GiB, 512MiB or a number of bytes", original);
  }
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "k" || unit == "kib")
    scale = 1024.0;
  else if (unit == "m" || unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    scale = 1e3;
  else if (unit == "mb")
    scale = 1e6;
  else if (unit == "gb")
    scale = 1e9;
  else if (unit == "tb")
    scale = 1e12;
  else
    fail("'{}' has an unknown unit '{}'; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", original,
         unit);
  const double bytes = number * scale;
  if (!(bytes < static_cast<double>(std::numeric_limits<int64_t>::max()))) {
    fail("size '{}' is too large", original);
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace pagoda
