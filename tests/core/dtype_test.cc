#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace pagoda
