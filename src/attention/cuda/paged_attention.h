// CUDA paged attention (DESIGN.md §4): KV writes through the slot mapping, then one tensor-core
// kernel for decode and prefill rows. Pages are addressed through runtime block, token and head
// strides, so NHD, HND and padded pages all work. Requires a bf16 cache, bf16 queries, and head
// sizes (K, V) of (16, 16), (32, 32), (64, 64), (128, 128), (256, 256), (192, 128) or (24, 16).
#pragma once

#include <cstdint>

#include "attention/backend.h"
#include "attention/cpu/cpu_attention.h"
#include "core/tensor.h"

namespace pagoda::cuda {

class AttentionPlan;

// True when the CUDA kernels compute a layer of these head sizes and GQA ratio.
bool paged_attention_supports(int64_t head_size_k, int64_t head_size_v, int64_t q_per_kv);

// KV splits the decode kernel uses for `pairs` (sequence, KV head) pairs of at most `max_seq_len`
// tokens: what a plan's fixed_decode_splits should be for a CUDA graph captured at that size.
int64_t decode_splits_for(int64_t head_size_k, int64_t head_size_v, int64_t pairs,
                          int64_t max_seq_len);

// query: [T, Hq, Dk] bf16 (unit inner stride, rows may be strided); key [T, Hkv, Dk] and value
// [T, Hkv, Dv] bf16, or both undefined (attend over the cache as it is). output: [T, Hq * Dv]
// bf16, contiguous. params.sinks, when set, points at [Hq] f32 in device memory. Only the plan's
// real rows are read or written. Queued on cuda::stream().
void paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                     const Tensor& value, const KvCacheView& cache, AttentionPlan& plan,
                     const Tensor& output);

}  // namespace pagoda::cuda
