// An RMSNorm's parameters, shared by the CPU and CUDA ops.
#pragma once

#include "core/tensor.h"

namespace pagoda {

// out = x / sqrt(mean(x²) + eps) * (weight + weight_offset) over the last dim; an undefined
// weight scales by 1.
struct RmsNormParams {
  Tensor weight;  // [dim]
  float eps = 1e-6f;
  float weight_offset = 0.0f;  // 1 for norms that scale by (1 + weight)
};

// One tensor of a norm_rope over several (a layer's q, k and v in one pass on a GPU): each head of
// x [T, heads, head_size] normalised by `norm`, then rotated unless `rotate` is false.
struct NormRopePart {
  Tensor x;
  RmsNormParams norm;
  bool rotate = true;
};
inline constexpr size_t kMaxRopeParts = 3;

}  // namespace pagoda
