// Runs a batch of requests to completion: one prefill step for every prompt, then batched decode
// steps. Greedy; the scheduler with preemption and sampling comes with the engine loop.
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
  int64_t max_tokens = 16;
  int64_t logprobs = 0;                    // top alternatives per generated token
  std::optional<int64_t> prompt_logprobs;  // when set: per prompt token, with this many top
  bool ignore_eos = false;
};

struct PromptLogprob {
  float logprob = 0.0f;  // of the prompt token itself
  std::vector<TokenLogprob> top;
};

struct GenerationResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<SampledToken> tokens;
  // One per prompt token; the first is empty (nothing predicts it).
  std::vector<std::optional<PromptLogprob>> prompt_logprobs;
  std::string finish_reason;  // "length" or "stop"
};

struct GeneratorLimits {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::vector<int64_t> eos_token_ids;
};

// Validates every request first (empty prompts, ids outside the vocabulary, lengths over
// max_model_len, negative counts), throwing Error naming the request and the limit.
std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const GeneratorLimits& limits,
                                       const std::vector<GenerationRequest>& requests);

}  // namespace pagoda
