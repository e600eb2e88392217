// Turns a scheduled batch into the step's device inputs — token ids, positions, slot mapping,
// block tables and per-group attention metadata, built once — runs the model and returns logits.
#pragma once

#include <cstdint>
#include <vector>

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
  Tensor logits;                   // [rows, vocab]
  std::vector<int64_t> first_row;  // per scheduled sequence (caller's order): its first logits row
  std::vector<int64_t> num_rows;   // and how many rows it has
};

class ModelRunner {
 public:
  ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache);

  // Runs one step. Decoding sequences (one new token after a non-empty cache) go first. Every
  // sequence's blocks must already cover its tokens.
  RunnerOutput execute(const std::vector<ScheduledSequence>& batch, const KvCacheManager& blocks);

  // The step's inputs, exposed for tests: sequences in execution order.
  ForwardBatch prepare(const std::vector<const ScheduledSequence*>& ordered,
                       const KvCacheManager& blocks) const;

 private:
  CausalLm& model_;
  const KvCachePlan& plan_;
  const KvCache& cache_;
  std::vector<int64_t> layer_groups_;
};

}  // namespace pagoda
