// Runs a list of requests to completion with continuous batching (engine/scheduler.h): chunked
// prefill within a token budget, prefix-cache hits, preemption when blocks run out; each request
// sampled with its own parameters.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace pagoda {

struct GenerationRequest {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
};

// Why a request ended: kNone while it runs.
enum class FinishReason { kNone, kStop, kLength, kAbort };
// "stop", "length", "abort" (as OpenAI's API names them), or "" for kNone.
std::string_view to_string(FinishReason reason);

struct PromptLogprob {
  float logprob = 0.0f;  // of the prompt token itself
  std::vector<TokenLogprob> top;
};

struct GenerationResult {
  std::vector<int32_t> prompt_token_ids;
  // Generated tokens; logprob and top are of the model's raw distribution (before penalties,
  // temperature and filters), as vLLM reports them.
  std::vector<SampledToken> tokens;
  // One per prompt token; the first is empty (nothing predicts it).
  std::vector<std::optional<PromptLogprob>> prompt_logprobs;
  FinishReason finish_reason = FinishReason::kNone;
};

struct EngineConfig {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::vector<int64_t> eos_token_ids;
  uint64_t seed = 0;  // streams of unseeded requests derive from it and the request's index
  SchedulerConfig scheduler;
  bool enforce_eager = false;  // on a GPU: no CUDA graphs for decode steps
};

struct GenerationStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;
  int64_t prefix_query_tokens = 0;  // tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // and found there
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t peak_blocks_used = 0;
};

// One step's news for one request: tokens sampled this step (none while its prompt is still being
// prefilled) and, once it ends, why.
struct RequestDelta {
  int64_t request_id = 0;
  std::vector<SampledToken> new_tokens;
  FinishReason finish_reason = FinishReason::kNone;
};

// The step loop: requests can be added and aborted between steps; each step returns deltas.
class Engine {
 public:
  Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
         const EngineConfig& config);

  // Validates and queues a request (Error names the problem and the limit); returns its id.
  int64_t add_request(GenerationRequest request);
  // The checks add_request makes, without queueing (safe from any thread: reads only config).
  void validate(const GenerationRequest& request) const;
  // Ends a request wherever it is and frees its blocks; its last delta says "abort".
  void abort(int64_t id);
  bool has_unfinished() const { return scheduler_.has_requests() || !aborted_.empty(); }
  // Runs one step of continuous batching.
  std::vector<RequestDelta> step();
  // Everything a request has produced so far.
  const GenerationResult& result(int64_t id) const;
  RequestStatus status(int64_t id) const;
  // Forgets a finished request (its result included), so a long-running engine does not keep
  // every request it has seen.
  void release(int64_t id);
  GenerationStats stats() const;
  int64_t num_free_blocks() const { return blocks_.num_free_blocks(); }
  int64_t num_running() const { return scheduler_.num_running(); }
  int64_t num_waiting() const { return scheduler_.num_waiting(); }

 private:
  struct Entry {
    GenerationRequest request;
    GenerationResult result;
    SchedulerRequest state;
    SamplerRng rng{0};
  };

  const Entry& entry(int64_t id) const;  // Error when there is no request `id`

  const KvCachePlan& plan_;
  EngineConfig config_;
  KvCacheManager blocks_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::map<int64_t, Entry> entries_;  // nodes stay put: the scheduler keeps pointers to state
  std::vector<int64_t> aborted_;      // aborted since the last step
  int64_t next_id_ = 0;
  GenerationStats counters_;
};

// Runs a fixed list of requests to completion (validating them all first) and checks that every
// block is back in the pool.
std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const EngineConfig& config,
                                       const std::vector<GenerationRequest>& requests,
                                       GenerationStats* stats = nullptr);

}  // namespace pagoda
