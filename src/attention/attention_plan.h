// The run side of an attention backend (DESIGN.md §4): what one layer computes, and the per-group
// plan that takes a step's metadata once and then runs every layer of the group.
#pragma once

#include <cstdint>

#include "attention/kv_layout.h"
#include "attention/metadata.h"
#include "core/device.h"
#include "core/tensor.h"

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
  const float* sinks = nullptr;  // [num_q_heads] f32 on the query's device: extra logits that
                                 // take probability and carry no value
  // [T, num_q_heads] f32 on the query's device, or null: each real row's log-sum-exp of its scaled
  // scores (the sink's included), -inf where it sees no key. What merges the outputs of ranks that
  // attend over shares of one sequence's keys (decode context parallelism).
  float* lse = nullptr;
  // An e4m3 cache (--kv-cache-dtype fp8) holds K · (1 / k_scale) and V · (1 / v_scale), rounded,
  // and reads them back times the scale: a checkpoint's calibrated scales (<attn>.k_scale and
  // .v_scale), 1 without. Caches of other dtypes ignore them (cache_scale()).
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// The scale a cache of `dtype` applies for a layer's `scale` (k_scale or v_scale): that scale for
// an e4m3 cache, 1 for any other.
inline float cache_scale(DType dtype, float scale) {
  return dtype == DType::kF8E4M3 ? scale : 1.0f;
}

// One layer's cache as its backend reads it: non-owning views of a shared buffer.
struct KvCacheView {
  Tensor cache;              // the backend's logical cache shape, with its physical strides
  Tensor key;                // [num_blocks, block_size, num_kv_heads, head_size_k]
  Tensor value;              // [num_blocks, block_size, num_kv_heads, head_size_v]
  int64_t block_stride = 0;  // elements between block b and b + 1
};

// The KV cache group a plan serves.
struct AttentionGroup {
  KvPageShape page;
  int64_t max_model_len = 0;  // the longest sequence a step holds
  Device device;
};

// How a step runs: eagerly, or as the step a CUDA graph is captured or replayed over, whose
// launch shapes are fixed for its (padded) batch size.
struct AttentionStep {
  // Sequences over the null block, written nowhere, appended to a decode-only batch to reach a
  // captured batch size; each has the decodes' query length (one token, or one and its drafts).
  int64_t padding_seqs = 0;
  bool graph = false;
};

// One KV cache group's attention for the current step: update() takes the step's metadata once,
// then forward() runs each layer of the group. Owned by whoever runs the model (one per group, and
// one per rank when ranks come). A backend that attends a shard of the KV (decode context
// parallelism) or verifies several draft tokens per sequence adds to this interface; the
// metadata's query_start already lets a sequence have any number of query rows.
class AttentionPlan {
 public:
  virtual ~AttentionPlan() = default;

  // Takes the step's metadata, which must stay alive and unchanged until the next update().
  virtual void update(const AttentionMetadata& metadata, const AttentionStep& step) = 0;

  // One layer over its cache view. query: [T, Hq, Dk]; key [T, Hkv, Dk] and value [T, Hkv, Dv],
  // or both undefined: the layer reads the cache as it is and writes nothing (KV sharing).
  // output: [T, Hq * Dv]. Only rows below the step's num_actual_tokens are read or written; with
  // K/V, each real row is first written to the cache at its slot (slot -1 is skipped). Activation
  // dtypes are the device's (f32 on the CPU, bf16 on a GPU).
  virtual void forward(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                       const Tensor& value, const KvCacheView& cache, const Tensor& output) = 0;

  // Changes whenever a buffer that forward() launches read is replaced: a CUDA graph captured
  // before must be captured again.
  virtual int64_t generation() const { return 0; }
};

// One attention layer's inputs for a step: its cache view and its group's plan.
struct LayerAttention {
  const KvCacheView* cache = nullptr;
  AttentionPlan* plan = nullptr;
};

}  // namespace pagoda
