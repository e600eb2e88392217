// Element types of tensors and their conversions.
#pragma once

#include <bit>
#include <cstdint>
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
// has no infinity); NaN stays NaN. Widening is exact.
float e4m3_to_f32(uint8_t bits);
uint8_t f32_to_e4m3(float value);
constexpr float kE4m3Max = 448.0f;

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
