// The interface every architecture implements, and the per-step batch it reads.
#pragma once

#include <memory>
#include <vector>

#include "attention/metadata.h"
#include "core/tensor.h"
#include "kv/kv_cache_plan.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace pagoda {

namespace cuda {
class AttentionPlan;
}

// One step's inputs, built by the model runner once and read by every layer.
struct ForwardBatch {
  std::vector<int32_t> token_ids;                      // [T]
  std::vector<int64_t> positions;                      // [T]
  std::vector<AttentionMetadata> group_metadata;       // per KV cache group
  const KvCache* kv_cache = nullptr;                   // per-layer cache views
  const std::vector<int64_t>* layer_groups = nullptr;  // attention layer -> its cache's group
  // A model on a GPU also gets the ids and positions there, and each group's device metadata.
  Tensor device_token_ids;                        // [T] int32
  Tensor device_positions;                        // [T] int64
  std::vector<cuda::AttentionPlan*> group_plans;  // per KV cache group
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  // Final hidden states [T, hidden] f32 of every token of the batch.
  virtual Tensor forward(const ForwardBatch& batch) = 0;
  // Logits [rows, vocab] f32 of the given hidden rows [rows, hidden].
  virtual Tensor compute_logits(const Tensor& hidden) = 0;
  // True when forward() waits on the host mid-step (MoE routing runs there), so a CUDA graph
  // cannot be captured over it.
  virtual bool synchronizes_with_host() const { return false; }
};

// Builds the architecture named in `config` with weights from `weights`. Throws Error naming the
// architecture when it has no implementation, and any weight that is missing or misshapen.
std::unique_ptr<CausalLm> build_causal_lm(const ModelConfig& config, WeightSource& weights);

}  // namespace pagoda
