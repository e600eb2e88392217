// One layer's paged attention on the device of its query: the CPU kernel reading the step's host
// metadata, or the CUDA kernels reading the group's device plan.
#pragma once

#include "attention/cpu/cpu_attention.h"

namespace pagoda {

namespace cuda {
class AttentionPlan;
}

// As cpu_paged_attention (DESIGN.md §4). On a GPU, `plan` is the group's device metadata and
// `device_sinks` ([Hq] f32 on the device) replaces params.sinks when the layer has sinks.
void paged_attention(const AttentionLayerParams& params, const Tensor& device_sinks,
                     const Tensor& query, const Tensor& key, const Tensor& value,
                     const KvCacheView& cache, const AttentionMetadata& metadata,
                     cuda::AttentionPlan* plan, const Tensor& output);

}  // namespace pagoda
