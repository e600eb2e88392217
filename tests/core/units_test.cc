#include "core/units.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace pagoda {
namespace {

TEST(UnitsTest, ParsesSizes) {
  EXPECT_EQ(parse_byte_size("65536"), 65536);
  EXPECT_EQ(parse_byte_size("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(parse_byte_size("4g"), int64_t{4} << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parse_byte_size("2KiB"), 2048);
}

TEST(UnitsTest, RejectsBadSizes) {
  for (const char* text : {"", "GiB", "4 parsecs", "-1", "1e400", "abc"}) {
    EXPECT_THROW(parse_byte_size(text), Error) << text;
  }
}

TEST(UnitsTest, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace pagoda
