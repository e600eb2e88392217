// Byte sizes as people write them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

// "1.50 GiB", "512 B".
std::string format_bytes(int64_t bytes);

// Parses "4GiB", "512MiB", "2G" (= GiB), "1.5GB" (decimal), "65536". Throws Error naming the text.
int64_t parse_byte_size(std::string_view text);

}  // namespace pagoda
