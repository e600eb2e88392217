// The CPU paged attention kernel (DESIGN.md §4).
#pragma once

#include "attention/attention_plan.h"

namespace pagoda {

// query: [T, Hq, Dk] f32. key: [T, Hkv, Dk] and value: [T, Hkv, Dv] f32, or both undefined: the
// layer reads the cache as it is and writes nothing (KV sharing). cache: the layer's view.
// output: [T, Hq * Dv] f32. Only rows below metadata.num_actual_tokens are read or written.
// With K/V, each real row is first written to the cache at its slot (slot -1 is skipped).
void cpu_paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                         const Tensor& value, const KvCacheView& cache,
                         const AttentionMetadata& metadata, const Tensor& output);

}  // namespace pagoda
