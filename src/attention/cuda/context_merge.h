// The CUDA side of merge_attention_parts (attention/context_merge.h): bf16 parts, f32 log-sum-exps.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace pagoda::cuda {

// As pagoda::merge_attention_parts, for bf16 parts on the current device; queued on
// cuda::stream().
void merge_attention_parts(const Tensor& parts, const Tensor& lses, int64_t head_begin,
                           const Tensor& out);

}  // namespace pagoda::cuda
