// Element types of tensors and their conversions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

int64_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "float32", "float16", "bfloat16", "int32", ...
bool is_floating(DType dtype);

// Parses a dtype name as written in HF configs or on the command line ("bfloat16", "bf16",
// "float32", "torch.float16", ...). Throws Error naming the value and the accepted names.
DType parse_dtype(std::string_view name);

// IEEE half and bfloat16 bit patterns <-> float. Narrowing rounds to nearest even; NaN stays NaN.
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);

}  // namespace pagoda
