// Decode context parallelism's merge: each rank attends over its share of a sequence's keys and
// returns its output with the log-sum-exp of its scores; the shares' outputs combine into the
// attention over all keys by weighting each with exp(lse - max lse) / Σ exp(lse - max lse).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace pagoda {

// out[t, h] = Σ_r w[r, t, head_begin + h] · parts[r, t, head_begin + h], with w the softmax over r
// of lses[r, t, head_begin + h]; zeros where every share saw no key (all -inf).
//   parts: [R, T, H, Dv], the activation dtype (f32 on the CPU, bf16 on a GPU), contiguous
//   lses:  [R, T, H] f32, contiguous, on the same device
//   out:   [T, H_out, Dv], parts' dtype, contiguous; heads [head_begin, head_begin + H_out) of H
void merge_attention_parts(const Tensor& parts, const Tensor& lses, int64_t head_begin,
                           const Tensor& out);

}  // namespace pagoda
