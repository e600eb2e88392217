#include "core/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace pagoda {

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
    case DType::kF8E4M3:
      return 1;
  }
  PAGODA_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
    case DType::kF8E4M3:
      return "float8_e4m3";
  }
  PAGODA_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

DType parse_dtype(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "float32" || name == "float" || name == "f32" || name == "fp32") return DType::kF32;
  if (name == "float16" || name == "half" || name == "f16" || name == "fp16") return DType::kF16;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "int32" || name == "i32") return DType::kI32;
  if (name == "int64" || name == "i64") return DType::kI64;
  if (name == "uint8" || name == "u8") return DType::kU8;
  if (name == "float8_e4m3" || name == "float8_e4m3fn" || name == "fp8" || name == "e4m3") {
    return DType::kF8E4M3;
  }
  fail(
      "unknown dtype '{}'; expected one of float32, float16, bfloat16, float8_e4m3, int32, int64, "
      "uint8",
      name);
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: renormalise
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      out = sign | static_cast<uint32_t>(127 - 15 + 1 - shift) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000u | mantissa << 13;
  } else {
    out = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  return std::bit_cast<float>(out);
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x47800000u) return sign | 0x7c00u;  // overflow (>= 65536) or inf
  if (abs < 0x38800000u) {                        // result is subnormal or zero
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent - 150) and the half subnormal unit is 2^-24.
    const int shift = 126 - static_cast<int>(exponent);
    const uint32_t truncated = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t rounded = truncated;
    if (remainder > halfway || (remainder == halfway && (truncated & 1u))) ++rounded;
    return static_cast<uint16_t>(sign | rounded);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits (carry may bump the exponent).
  uint32_t rebased = abs - (static_cast<uint32_t>(127 - 15) << 23);
  const uint32_t remainder = rebased & 0x1fffu;
  rebased >>= 13;
  if (remainder > 0x1000u || (remainder == 0x1000u && (rebased & 1u))) ++rebased;
  return static_cast<uint16_t>(sign | rebased);
}

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4m3Max) return sign | 0x7e;  // saturates, infinity included
  // The spacing of representable values around `magnitude`: 2^-9 among subnormals (below 2^-6),
  // else 2^(e - 3) in the binade [2^e, 2^(e+1)). Rounding to a multiple of it is exact in f32, and
  // std::nearbyint rounds halves to even in the default rounding mode.
  int binade = 0;
  std::frexp(magnitude, &binade);  // magnitude in [2^(binade-1), 2^binade)
  const int unit_exponent = std::max(binade - 1, -6) - 3;
  const float units = std::nearbyint(std::ldexp(magnitude, -unit_exponent));
  // units * 2^unit_exponent; a carry to the next binade is still the right pattern below.
  const float rounded = std::ldexp(units, unit_exponent);
  if (rounded == 0.0f) return sign;
  if (rounded < 0x1p-6f) return sign | static_cast<uint8_t>(units);  // subnormal
  int e = 0;
  const float fraction = std::frexp(rounded, &e);  // rounded = fraction * 2^e, fraction in [0.5, 1)
  const int mantissa = static_cast<int>(fraction * 16.0f) - 8;
  return sign | static_cast<uint8_t>((e - 1 + 7) << 3 | mantissa);
}

}  // namespace pagoda
