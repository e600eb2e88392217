// Runs a batch of requests to completion: one prefill step for every prompt, then batched decode
// steps, each request sampled with its own parameters. The scheduler with chunked prefill and
// preemption comes with the engine loop.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sampler.h"

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
};

// Validates every request first (empty prompts, ids outside the vocabulary, lengths over
// max_model_len, sampling parameters), throwing Error naming the request and the limit.
std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const GeneratorConfig& config,
                                       const std::vector<GenerationRequest>& requests);

}  // namespace pagoda
