#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"

namespace pagoda {
namespace {

TEST(DTypeTest, SizesAndNames) {
  struct Case {
    DType dtype;
    int64_t size;
    const char* name;
  };
  for (const Case& c : {Case{DType::kF32, 4, "float32"}, Case{DType::kF16, 2, "float16"},
                        Case{DType::kBF16, 2, "bfloat16"}, Case{DType::kI32, 4, "int32"},
                        Case{DType::kI64, 8, "int64"}, Case{DType::kU8, 1, "uint8"}}) {
    EXPECT_EQ(dtype_size(c.dtype), c.size) << c.name;
    EXPECT_EQ(dtype_name(c.dtype), c.name);
    EXPECT_EQ(parse_dtype(c.name), c.dtype);
  }
  EXPECT_EQ(parse_dtype("torch.bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("half"), DType::kF16);
  EXPECT_THROW(parse_dtype("float8"), Error);
}

TEST(DTypeTest, HalfKnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                          // largest finite half
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                          // rounds up to infinity
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie rounds to even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 units rounds to 2
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);             // smallest normal
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even, down
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even, up
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(f32_to_f16(value), bits) << "pattern " << bits;
  }
}

TEST(DTypeTest, HalfRoundsToNearest) {
  // Every float between two adjacent halves maps to the nearer one.
  for (uint16_t bits = 0x0001; bits < 0x7bff; bits += 97) {
    const float low = f16_to_f32(bits);
    const float high = f16_to_f32(static_cast<uint16_t>(bits + 1));
    EXPECT_EQ(f32_to_f16(low + (high - low) * 0.3f), bits);
    EXPECT_EQ(f32_to_f16(low + (high - low) * 0.7f), bits + 1);
  }
}

TEST(DTypeTest, BFloat16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie to even, down
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie to even, up
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -7) * 0.75f), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = bf16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(f32_to_bf16(value), bits);
  }
}

// e4m3 against its definition: the 126 finite positive values are m / 8 * 2^-6 (exponent field
// 0) and (1 + m / 8) * 2^(e - 7) for e in 1..15 (except e = 15, m = 7, which is NaN).
TEST(DTypeTest, E4m3) {
  std::vector<std::pair<float, uint8_t>> finite;  // positive values and their patterns
  for (int bits = 0; bits < 0x7f; ++bits) {
    const int e = bits >> 3;
    const int m = bits & 7;
    const float expected = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
    ASSERT_EQ(e4m3_to_f32(static_cast<uint8_t>(bits)), expected) << bits;
    ASSERT_EQ(e4m3_to_f32(static_cast<uint8_t>(bits | 0x80)), -expected) << bits;
    finite.push_back({expected, static_cast<uint8_t>(bits)});
    // Every finite pattern survives the round trip (negative zero included).
    ASSERT_EQ(f32_to_e4m3(expected), bits);
    ASSERT_EQ(f32_to_e4m3(-expected), bits | 0x80);
  }
  EXPECT_EQ(finite.back().first, kE4m3Max);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(f32_to_e4m3(std::nanf("")) & 0x7f, 0x7f);
  // Saturation: past the largest value, and the infinities.
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(460.0f), 0x7e);
  // Every value between two neighbours goes to the nearer one; exact halves to the even pattern.
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const auto [low, low_bits] = finite[i];
    const auto [high, high_bits] = finite[i + 1];
    ASSERT_EQ(f32_to_e4m3(low + (high - low) * 0.25f), low_bits);
    ASSERT_EQ(f32_to_e4m3(low + (high - low) * 0.75f), high_bits);
    const uint8_t even = (low_bits & 1) == 0 ? low_bits : high_bits;
    ASSERT_EQ(f32_to_e4m3(low + (high - low) * 0.5f), even) << low << " " << high;
  }
  // Below half the smallest subnormal (2^-9) rounds to zero; at it, to even (zero).
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -11)), 0x00);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kF8E4M3);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1);
  EXPECT_FALSE(is_floating(DType::kF8E4M3));
}

}  // namespace
}  // namespace pagoda
