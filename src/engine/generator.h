// Runs a list of requests to completion with continuous batching (engine/scheduler.h): chunked
// prefill within a token budget, prefix-cache hits, preemption when blocks run out; each request
// sampled with its own parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace pagoda {

struct GenerationRequest {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
};

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
  std::string finish_reason;  // "length" or "stop"
};

struct GeneratorConfig {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::vector<int64_t> eos_token_ids;
  uint64_t seed = 0;  // streams of unseeded requests derive from it and the request's index
  SchedulerConfig scheduler;
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

// Validates every request first (empty prompts, ids outside the vocabulary, lengths over
// max_model_len, sampling parameters), throwing Error naming the request and the limit.
std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const GeneratorConfig& config,
                                       const std::vector<GenerationRequest>& requests,
                                       GenerationStats* stats = nullptr);

}  // namespace pagoda
