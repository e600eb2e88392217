// Dense matrix products on the CPU through OpenBLAS sgemm.
#pragma once

#include "core/tensor.h"
#include "ops/weight.h"

namespace pagoda::cpu {

// out[M, N] = x[M, K] · weight[N, K]ᵀ. x and out are contiguous f32; weight is contiguous f32, f16
// or bf16, or FP8 with its scales. Half-precision and FP8 weights stay in their dtype and are
// widened (FP8: dequantized) to f32 a tile of rows at a time just before each sgemm, so a bf16 or
// FP8 model needs no f32 copy of its weights. FP8 is thus exact: the product of the dequantized
// weight, with f32 activations.
void linear(const Tensor& x, const Weight& weight, const Tensor& out);

}  // namespace pagoda::cpu
