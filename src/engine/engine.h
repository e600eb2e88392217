// The engine: requests come in, and each step() schedules them with continuous batching
// (engine/scheduler.h: chunked prefill within a token budget, prefix-cache hits, preemption when
// blocks run out), runs the model, samples each with its own parameters and returns what changed.
// generate() runs a fixed list to completion.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/proposer.h"
#include "engine/rank_runners.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace pagoda {

struct GenerationRequest {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
};

struct EngineConfig {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::vector<int64_t> eos_token_ids;
  uint64_t seed = 0;  // streams of unseeded requests derive from it and the request's index
  SchedulerConfig scheduler;
  bool enforce_eager = false;  // on a GPU: no CUDA graphs for decode steps
  // Tensor parallelism in this process (engine/rank_runners.h): the communicator of the engine's
  // own model (rank 0), and the other ranks, each run on a thread of its own with the same step
  // inputs. Empty for one rank.
  Communicator* communicator = nullptr;
  Communicator* context_communicator = nullptr;  // rank 0's in its DCP group, with DCP groups
  std::vector<RankShard> other_ranks;
};

struct GenerationStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;
  int64_t prefix_query_tokens = 0;  // tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // and found there
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t peak_blocks_used = 0;
  // Speculative decoding, as vLLM counts it: verify rounds (a request's drafts checked in a step),
  // drafts proposed and kept, and kept per position (index j: rounds that kept draft j).
  int64_t spec_rounds = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  // Wall time of drafting in steps that verify drafts: the proposer's forwards, which end in a
  // copy of the drafts to the host, so on a GPU it is their device time too.
  double spec_draft_seconds = 0;

  // Kept drafts over proposed ones; 1 + kept drafts per round (the tokens a round yields).
  double spec_acceptance_rate() const;
  double spec_mean_acceptance_length() const;
};

// One step's news for one request: tokens sampled this step (none while its prompt is still being
// prefilled) and, once it ends, why.
struct RequestDelta {
  int64_t request_id = 0;
  std::vector<SampledToken> new_tokens;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;  // with kError: what failed
  // With prompt log-probabilities asked for, in the delta of the first generated token: one per
  // prompt token, the first empty.
  std::vector<std::optional<Logprobs>> prompt_logprobs;
};

// The step loop: requests can be added and aborted between steps; each step returns deltas.
class Engine {
 public:
  // With a drafter (planned in `plan` after the model's layers), decoding requests verify its
  // drafts: config.scheduler.num_speculative_tokens is taken from the drafter's config.
  Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache, const EngineConfig& config,
         Drafter* drafter = nullptr);
  // With a proposer of one's own, verifying up to `num_speculative_tokens` drafts a step.
  Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache, const EngineConfig& config,
         std::unique_ptr<Proposer> proposer, int64_t num_speculative_tokens);

  // Validates and queues a request (Error names the problem and the limit); returns its id.
  int64_t add_request(GenerationRequest request);
  // The checks add_request makes, without queueing (safe from any thread: reads only config).
  void validate(const GenerationRequest& request) const;
  // Ends a request wherever it is and frees its blocks; its last delta says "abort".
  void abort(int64_t id);
  // Ends a request wherever it is with FinishReason::kError and `error`, frees its blocks and
  // returns its last delta. A failed step ends its own requests so; the server ends every request
  // so when a step fails outside the model and sampler.
  RequestDelta fail_request(int64_t id, const std::string& error);
  bool has_unfinished() const { return scheduler_.has_requests() || !aborted_.empty(); }
  // Runs one step of continuous batching: schedule, run the model, sample, append the tokens.
  // When running or sampling fails, the step's requests end with FinishReason::kError and the
  // error; the rest of the engine carries on.
  std::vector<RequestDelta> step();
  // A request's state and everything it has produced so far. Error when there is no request `id`.
  const Request& request(int64_t id) const;
  RequestStatus status(int64_t id) const { return request(id).status; }
  // Forgets a finished request, so a long-running engine does not keep every request it has seen.
  void release(int64_t id);
  GenerationStats stats() const;
  int64_t num_free_blocks() const { return blocks_.num_free_blocks(); }
  int64_t num_running() const { return scheduler_.num_running(); }
  int64_t num_waiting() const { return scheduler_.num_waiting(); }

 private:
  // What both public constructors build: everything but the proposer.
  struct WithoutProposer {};
  Engine(WithoutProposer, CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
         const EngineConfig& config, int64_t num_speculative_tokens);
  // The request `id`, for changing it. Error when there is none.
  Request& find(int64_t id);
  // Deltas of the requests aborted since the last step.
  std::vector<RequestDelta> take_aborted();
  // Appends each chunk's sampled tokens to its request (up to the first that ends it), advances
  // the requests past their computed tokens (kept drafts included), and ends those that are done.
  void append_tokens(std::span<const ScheduledChunk> chunks,
                     std::span<const std::vector<SampledToken>> tokens,
                     std::vector<RequestDelta>& deltas);
  // Why `request` ends after taking `token`, or kNone.
  FinishReason finish_reason(const Request& request, int32_t token) const;

  const KvCachePlan& plan_;
  EngineConfig config_;
  KvCacheManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  Sampler sampler_;
  std::unique_ptr<Proposer> proposer_;   // with a drafter
  std::unique_ptr<RankRunners> ranks_;   // with tensor parallelism
  std::map<int64_t, Request> requests_;  // nodes stay put: other rooms keep pointers to them
  std::vector<int64_t> aborted_;         // aborted since the last step
  int64_t next_id_ = 0;
  GenerationStats counters_;
};

// Runs a fixed list of requests to completion (validating them all first), checks that every
// block is back in the pool, and returns the finished requests in order. Error (naming the request)
// when a step failed one of them.
std::vector<Request> generate(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
                              const EngineConfig& config,
                              const std::vector<GenerationRequest>& requests,
                              GenerationStats* stats = nullptr, Drafter* drafter = nullptr);

}  // namespace pagoda
