// Turns a scheduled batch into the step's device inputs — token ids, positions, slot mapping,
// block tables and per-group attention metadata, built once — runs the model and returns logits.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/device_inputs.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "model/causal_lm.h"

namespace pagoda {

struct RunnerOutput {
  Tensor logits;                   // [rows, vocab] f32, on the model's device
  std::vector<int64_t> first_row;  // per chunk (caller's order): its first row of logits
};

struct RunnerOptions {
  // The plan index of the model's first attention layer: 0 for the target, the target's layer
  // count for a drafter planned in the same pool.
  int64_t first_layer = 0;
  // On a GPU, decode-only steps replay CUDA graphs captured per padded batch size unless set.
  bool enforce_eager = false;
};

class ModelRunner {
 public:
  ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
              const RunnerOptions& options = {});
  ~ModelRunner();

  // Whether the model runs on a GPU, where its logits stay.
  bool on_device() const { return device_inputs_ != nullptr; }

  // Runs one step over the chunks' tokens and returns the logits of each chunk's last
  // logits_rows[i] tokens. Decoding chunks (one token after a non-empty cache) run first. Every
  // chunk's blocks must already cover its tokens.
  RunnerOutput execute(std::span<const ScheduledChunk> chunks, std::span<const int64_t> logits_rows,
                       const KvCacheManager& blocks);

  // The step's inputs: chunks in execution order, then `padding_tokens` padding rows (token 0,
  // position 0), which the metadata leaves out of num_actual_tokens and the slot mapping, as a
  // batch padded to a captured size is.
  ForwardBatch prepare(std::span<const ScheduledChunk> ordered, const KvCacheManager& blocks,
                       int64_t padding_tokens = 0) const;

 private:
  // The logits of `rows` of a step's hidden states (when they are all the rows, without a copy).
  Tensor logits_of(const Tensor& hidden, const std::vector<int64_t>& rows) const;
  // A decode-only step of the `ordered` chunks through a graph padded to a captured size.
  Tensor run_decode_graph(std::span<const ScheduledChunk> ordered, const KvCacheManager& blocks);

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
