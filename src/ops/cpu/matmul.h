// Dense matrix products on the CPU through OpenBLAS sgemm.
#pragma once

#include "core/tensor.h"

namespace pagoda::cpu {

// out[M, N] = x[M, K] · weight[N, K]ᵀ. x and out are contiguous f32; weight is contiguous f32, f16
// or bf16. Half-precision weights stay in their dtype and are widened to f32 a tile of rows at a
// time just before each sgemm, so a bf16 model needs no f32 copy of its weights.
void linear(const Tensor& x, const Tensor& weight, const Tensor& out);

}  // namespace pagoda::cpu
