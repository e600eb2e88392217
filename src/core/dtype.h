// Element types of tensors and their conversions.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace pagoda {

// kF8E4M3 is OCP e4m3 ("fn": no infinities, NaN 0x7f/0xff, largest finite 448), the FP8 of
// Hugging Face checkpoints; it holds quantized weights and KV, never activations.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3 };

int64_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "float32", "float16", "bfloat16", "int32", ...
bool is_floating(DType dtype);             // f32, f16, bf16 (not FP8, which needs scales)

// Parses a dtype name as written in HF configs or on the command line ("bfloat16", "bf16",
// "float32", "torch.float16", "float8_e4m3fn", ...). Throws Error naming the value and the accepted
// names.
DType parse_dtype(std::string_view name);

// IEEE half and bfloat16 bit patterns <-> float. Narrowing rounds to nearest even; NaN stays NaN.
// The bfloat16 pair is inline: weight widening calls it once per element.
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// e4m3 bit patterns <-> float. Narrowing rounds to nearest even and saturates to ±448 (the format
// has no infinity); NaN stays NaN. Widening is exact, and a lookup in a table built at compile
// time: FP8 KV caches and weights widen every element they read on the CPU.
uint8_t f32_to_e4m3(float value);
constexpr float kE4m3Max = 448.0f;

namespace detail {

// The value of an e4m3 bit pattern from its fields: subnormals (exponent field 0) are
// mantissa · 2^-9, normals (8 + mantissa) · 2^(exponent - 10); 0x7f and 0xff are NaN. Scaling by
// halves and doubles is exact.
constexpr float e4m3_value(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float value = static_cast<float>(exponent == 0 ? mantissa : 8 + mantissa);
  for (int shift = exponent == 0 ? -9 : exponent - 10; shift != 0; shift += shift < 0 ? 1 : -1)
    value *= shift < 0 ? 0.5f : 2.0f;
  return (bits & 0x80u) != 0 ? -value : value;
}

inline constexpr std::array<float, 256> kE4m3Values = [] {
  std::array<float, 256> values{};
  for (int bits = 0; bits < 256; ++bits)
    values[bits] = e4m3_value(static_cast<uint8_t>(bits));
  return values;
}();

}  // namespace detail

inline float e4m3_to_f32(uint8_t bits) {
  return detail::kE4m3Values[bits];
}

inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace pagoda
