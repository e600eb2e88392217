// Turns a scheduled batch into the step's inputs — token ids, positions, and per KV group the
// attention metadata (slot mapping, block tables), built once and handed to the group's attention
// plan — runs the model and returns logits. On a GPU, decode-only steps replay CUDA graphs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "model/causal_lm.h"

namespace pagoda {

struct RunnerOutput {
  Tensor hidden;                   // [rows, hidden]: the final hidden states of the logits rows
  Tensor logits;                   // [rows, vocab] f32, on the model's device
  std::vector<int64_t> first_row;  // per chunk (caller's order): its first row of logits
};

// Batch sizes CUDA graphs are captured at: 1, 2, 4, 8, then multiples of 8 up to kMaxGraphBatch.
inline constexpr int64_t kMaxGraphBatch = 256;
int64_t graph_batch_size(int64_t batch);

struct RunnerOptions {
  // The plan index of the model's first attention layer: 0 for the target, the target's layer
  // count for a drafter planned in the same pool.
  int64_t first_layer = 0;
  // On a GPU, decode-only steps replay CUDA graphs captured per padded batch size and query length
  // (1 + drafts) unless set.
  bool enforce_eager = false;
  // Under decode context parallelism (the plan's context_parallel_size), this rank's place: it
  // writes and attends the tokens dealt to it.
  int64_t context_rank = 0;
};

// One read-only query token of a request: `token` at `position`, attending to the first `seq_len`
// tokens of its cache and writing no K/V (a drafter reading the target's cache).
struct QueryToken {
  const Request* request = nullptr;
  int32_t token = 0;
  int64_t position = 0;
  int64_t seq_len = 0;
};

class ModelRunner {
 public:
  // Makes an attention plan for each KV group the model's layers read, with the backend the KV
  // plan names for them, on the cache's device.
  ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
              const RunnerOptions& options = {});
  ~ModelRunner();

  // Whether the model runs on a GPU, where its logits stay.
  bool on_device() const { return !device_.is_cpu(); }

  // Runs one step over the chunks' tokens (drafts included) and returns the logits of each chunk's
  // last logits_rows[i] tokens. Decoding chunks (one token after a non-empty cache) run first.
  // Every chunk's blocks must already cover its tokens.
  RunnerOutput execute(std::span<const ScheduledChunk> chunks, std::span<const int64_t> logits_rows,
                       const KvCacheManager& blocks);

  // The step's inputs, ready for the model: chunks in execution order, then `padding_rows` rows
  // (token 0, position 0) that the metadata leaves out of num_actual_tokens and the slot mapping.
  // Updates every attention plan with the step (`step` says whether those rows are padding
  // sequences of a CUDA graph's batch). Valid until the next call.
  const ForwardBatch& prepare(std::span<const ScheduledChunk> ordered, const KvCacheManager& blocks,
                              int64_t padding_rows = 0, const AttentionStep& step = {});
  // A step of the query tokens, in order; updates every attention plan as prepare() does. With
  // `graph`, a CUDA graph's step: padded to graph_batch_size() with one-row sequences over the null
  // block.
  const ForwardBatch& prepare_queries(std::span<const QueryToken> queries,
                                      const KvCacheManager& blocks, bool graph = false);
  // Whether steps may replay CUDA graphs: on a GPU, unless enforce_eager.
  bool graphs_enabled() const { return on_device() && !enforce_eager_; }
  // Changes whenever a buffer a captured graph reads is replaced.
  int64_t generation() const;
  // Group `group`'s metadata of the last prepare().
  const AttentionMetadata& metadata(int64_t group) const { return metadata_[group]; }

 private:
  // `rows` of a step's hidden states (when they are all the rows, without a copy).
  static Tensor select_rows(const Tensor& hidden, const std::vector<int64_t>& rows);
  // A decode-only step of the `ordered` chunks through a graph padded to a captured size.
  void run_decode_graph(std::span<const ScheduledChunk> ordered, const KvCacheManager& blocks,
                        RunnerOutput& output);
  // Building a step's inputs: begin, add each sequence (its last num_queries of seq_len tokens
  // are queries; `writes`: their K/V go to the cache), finish with padding rows and the plans'
  // update.
  void begin_step(int64_t num_tokens, const KvCacheManager& blocks);
  void add_sequence(const Request& request, int64_t num_queries, int64_t seq_len, bool writes,
                    bool decode);
  const ForwardBatch& finish_step(int64_t padding_rows, const AttentionStep& step);
  // Copies the batch's ids and positions to the device, into buffers that keep their addresses.
  void upload_tokens();

  CausalLm& model_;
  const KvCachePlan& plan_;
  Device device_;
  bool enforce_eager_ = false;
  ContextShard context_;            // this rank's share of each sequence's tokens
  std::vector<KvCacheView> views_;  // per model layer
  std::vector<std::unique_ptr<AttentionPlan>> plans_;  // per (KV group, backend) the layers read
  std::vector<int64_t> plan_groups_;                   // the KV group of each plan
  std::vector<LayerAttention> layers_;                 // per model layer: its view and plan
  std::vector<AttentionMetadata> metadata_;            // per KV group, rebuilt each step
  ForwardBatch batch_;                                 // the step's inputs
  Tensor device_ids_;                                  // [capacity] int32, on a GPU
  Tensor device_positions_;                            // [capacity] int64, on a GPU
  int64_t token_buffers_ = 0;                          // allocations of the two above
  struct DecodeGraph;
  // By padded batch size and query rows per sequence.
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<DecodeGraph>> graphs_;
};

}  // namespace pagoda
