// The CPU paged attention kernel (DESIGN.md §4).
#pragma once

#include "attention/backend.h"
#include "attention/metadata.h"

namespace pagoda {

// What one attention layer computes, beyond its cache.
struct AttentionLayerParams {
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_size_k = 0;
  int64_t head_size_v = 0;
  float scale = 1.0f;            // applied to q·k
  int64_t sliding_window = 0;    // 0: full; else a query at p sees keys in (p - window, p]
  float logit_softcap = 0.0f;    // 0: none; else scores = cap * tanh(scores / cap)
  const float* sinks = nullptr;  // [num_q_heads] extra logits that take probability, no value
};

// query: [T, Hq, Dk] f32. key: [T, Hkv, Dk] and value: [T, Hkv, Dv] f32, or both undefined: the
// layer reads the cache as it is and writes nothing (KV sharing). cache: the layer's view.
// output: [T, Hq * Dv] f32. Only rows below metadata.num_actual_tokens are read or written.
// With K/V, each real row is first written to the cache at its slot (slot -1 is skipped).
void cpu_paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                         const Tensor& value, const KvCacheView& cache,
                         const AttentionMetadata& metadata, const Tensor& output);

}  // namespace pagoda
