// Turns a scheduled batch into the step's device inputs — token ids, positions, slot mapping,
// block tables and per-group attention metadata, built once — runs the model and returns logits.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device_inputs.h"
#include "kv/kv_cache_manager.h"
#include "model/causal_lm.h"

namespace pagoda {

struct ScheduledSequence {
  int64_t request_id = 0;
  std::vector<int32_t> new_token_ids;  // tokens to compute this step
  int64_t num_computed_tokens = 0;     // tokens already in the cache before them
  bool all_logits = false;             // logits for every new token, not only the last
};

struct RunnerOutput {
  Tensor logits;                   // [rows, vocab] f32 on the host
  std::vector<int64_t> first_row;  // per scheduled sequence (caller's order): its first logits row
  std::vector<int64_t> num_rows;   // and how many rows it has
};

class ModelRunner {
 public:
  // `first_layer` is the plan index of the model's first attention layer: 0 for the target, the
  // target's layer count for a drafter planned in the same pool.
  ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
              int64_t first_layer = 0);

  // Runs one step. Decoding sequences (one new token after a non-empty cache) go first. Every
  // sequence's blocks must already cover its tokens.
  RunnerOutput execute(const std::vector<ScheduledSequence>& batch, const KvCacheManager& blocks);

  // The step's inputs: sequences in execution order, then `padding_tokens` padding rows (token 0,
  // position 0), which the metadata leaves out of num_actual_tokens and the slot mapping, as a
  // batch padded to a captured size is.
  ForwardBatch prepare(const std::vector<const ScheduledSequence*>& ordered,
                       const KvCacheManager& blocks, int64_t padding_tokens = 0) const;

 private:
  CausalLm& model_;
  const KvCachePlan& plan_;
  KvCache layer_views_;  // the model's layers' views of the cache
  std::vector<int64_t> layer_groups_;
  std::unique_ptr<DeviceInputs> device_inputs_;  // when the cache is on a GPU
};

}  // namespace pagoda
