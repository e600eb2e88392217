// Turns a scheduled batch into the step's device inputs — token ids, positions, slot mapping,
// block tables and per-group attention metadata, built once — runs the model and returns logits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/device_inputs.h"
#include "kv/kv_cache_manager.h"
#include "model/causal_lm.h"
#include "ops/sampling_row.h"

namespace pagoda {

struct ScheduledSequence {
  int64_t request_id = 0;
  std::vector<int32_t> new_token_ids;  // tokens to compute this step
  int64_t num_computed_tokens = 0;     // tokens already in the cache before them
  bool all_logits = false;             // logits for every new token, not only the last
};

struct RunnerOutput {
  Tensor logits;  // [rows, vocab] f32 on the host; undefined when sampled on the device
  // With StepOptions::device_sampling on a GPU: each row's token and its log-probability.
  std::vector<int32_t> sampled_ids;     // [rows]
  std::vector<float> sampled_logprobs;  // [rows]
  std::vector<int64_t> first_row;  // per scheduled sequence (caller's order): its first logits row
  std::vector<int64_t> num_rows;   // and how many rows it has
};

struct RunnerOptions {
  // The plan index of the model's first attention layer: 0 for the target, the target's layer
  // count for a drafter planned in the same pool.
  int64_t first_layer = 0;
  // On a GPU, decode-only steps replay CUDA graphs captured per padded batch size unless set.
  bool enforce_eager = false;
};

struct StepOptions {
  // Given when every scheduled sequence (one logits row each) takes its token from its logits
  // alone: one entry per sequence, in the caller's order. On a GPU the tokens are then sampled
  // there and the logits stay on the device; on the host they are ignored.
  std::vector<SamplingRow> device_sampling;
};

class ModelRunner {
 public:
  ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
              const RunnerOptions& options = {});
  ~ModelRunner();

  // Whether the model runs on a GPU, where StepOptions::device_sampling applies.
  bool on_device() const { return device_inputs_ != nullptr; }

  // Runs one step. Decoding sequences (one new token after a non-empty cache) go first. Every
  // sequence's blocks must already cover its tokens.
  RunnerOutput execute(const std::vector<ScheduledSequence>& batch, const KvCacheManager& blocks,
                       const StepOptions& options = {});

  // The step's inputs: sequences in execution order, then `padding_tokens` padding rows (token 0,
  // position 0), which the metadata leaves out of num_actual_tokens and the slot mapping, as a
  // batch padded to a captured size is.
  ForwardBatch prepare(const std::vector<const ScheduledSequence*>& ordered,
                       const KvCacheManager& blocks, int64_t padding_tokens = 0) const;

 private:
  // The logits of `rows` of a step's hidden states (when they are all the rows, without a copy).
  Tensor logits_of(const Tensor& hidden, const std::vector<int64_t>& rows) const;
  // A decode-only step of the `ordered` sequences through a graph padded to a captured size.
  Tensor run_decode_graph(const std::vector<const ScheduledSequence*>& ordered,
                          const KvCacheManager& blocks);

  CausalLm& model_;
  const KvCachePlan& plan_;
  KvCache layer_views_;  // the model's layers' views of the cache
  std::vector<int64_t> layer_groups_;
  std::unique_ptr<DeviceInputs> device_inputs_;  // when the cache is on a GPU
  bool enforce_eager_ = false;
  struct DecodeGraph;
  std::map<int64_t, std::unique_ptr<DecodeGraph>> graphs_;  // by padded batch size
};

}  // namespace pagoda
