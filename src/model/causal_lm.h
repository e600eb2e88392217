// The interface every architecture implements, and the per-step batch it reads.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "attention/attention_plan.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace pagoda {

// One step's inputs, built by the model runner once and read by every layer.
struct ForwardBatch {
  std::vector<int32_t> token_ids;  // [T]
  std::vector<int64_t> positions;  // [T]
  // A model on a GPU also gets the ids and positions there.
  Tensor device_token_ids;  // [T] int32
  Tensor device_positions;  // [T] int64
  // Per attention layer of the model: its cache view and its group's plan, updated for the step.
  std::span<const LayerAttention> attention;
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

// Builds the architecture named in `config` with weights from `weights`: rank tp.rank's shard of it
// under tensor parallelism (each rank reads only its slices), its projections quantized as
// config.quantization says. Throws Error naming the architecture
// when it has no implementation or does not split over tp.size ranks (check_tensor_parallel), and
// any weight that is missing or misshapen.
std::unique_ptr<CausalLm> build_causal_lm(const ModelConfig& config, WeightSource& weights,
                                          const TensorParallel& tp = {});

}  // namespace pagoda
