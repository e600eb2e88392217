#include "engine/generator.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {
namespace {

void validate(const GeneratorLimits& limits, const std::vector<GenerationRequest>& requests) {
  for (size_t r = 0; r < requests.size(); ++r) {
    const GenerationRequest& request = requests[r];
    const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
    if (prompt == 0) fail("request {} has an empty prompt", r);
    for (int32_t id : request.prompt_token_ids) {
      if (id < 0 || id >= limits.vocab_size) {
        fail("request {} has token id {}; the vocabulary has ids 0..{}", r, id,
             limits.vocab_size - 1);
      }
    }
    if (request.max_tokens < 1)
      fail("request {}: max_tokens is {}; it must be at least 1", r, request.max_tokens);
    if (request.logprobs < 0 || request.prompt_logprobs.value_or(0) < 0) {
      fail("request {}: logprobs counts must not be negative", r);
    }
    if (prompt + request.max_tokens > limits.max_model_len) {
      fail("request {}: prompt of {} tokens plus max_tokens {} exceeds max_model_len {}", r, prompt,
           request.max_tokens, limits.max_model_len);
    }
  }
}

bool is_eos(const GeneratorLimits& limits, int32_t token) {
  return std::find(limits.eos_token_ids.begin(), limits.eos_token_ids.end(), token) !=
         limits.eos_token_ids.end();
}

}  // namespace

std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const GeneratorLimits& limits,
                                       const std::vector<GenerationRequest>& requests) {
  validate(limits, requests);
  KvCacheManager blocks(plan);
  ModelRunner runner(model, plan, cache);
  std::vector<GenerationResult> results(requests.size());
  std::vector<ScheduledSequence> step;
  std::vector<size_t> step_requests;
  for (size_t r = 0; r < requests.size(); ++r) {
    const GenerationRequest& request = requests[r];
    results[r].prompt_token_ids = request.prompt_token_ids;
    const int64_t total =
        static_cast<int64_t>(request.prompt_token_ids.size()) + request.max_tokens;
    // Reserve every block up front so no request can run out mid-way.
    if (!blocks.allocate_slots(static_cast<int64_t>(r), total)) {
      fail(
          "the KV cache has {} free blocks; request {} needs {} more: raise --kv-cache-memory or "
          "send fewer requests at once",
          blocks.num_free_blocks(), r, blocks.blocks_needed(static_cast<int64_t>(r), total));
    }
    step.push_back({.request_id = static_cast<int64_t>(r),
                    .new_token_ids = request.prompt_token_ids,
                    .num_computed_tokens = 0,
                    .all_logits = request.prompt_logprobs.has_value()});
    step_requests.push_back(r);
  }

  while (!step.empty()) {
    const RunnerOutput output = runner.execute(step, blocks);
    const Tensor logprobs = compute_logprobs(output.logits);
    const int64_t vocab = logprobs.size(1);
    std::vector<ScheduledSequence> next;
    std::vector<size_t> next_requests;
    for (size_t i = 0; i < step.size(); ++i) {
      const size_t r = step_requests[i];
      const GenerationRequest& request = requests[r];
      GenerationResult& result = results[r];
      const int64_t last_row = output.first_row[i] + output.num_rows[i] - 1;
      if (step[i].all_logits) {
        // Row j predicts prompt token j + 1.
        result.prompt_logprobs.assign(1, std::nullopt);
        for (int64_t j = 0; j + 1 < output.num_rows[i]; ++j) {
          const float* row = logprobs.data<float>() + (output.first_row[i] + j) * vocab;
          const int32_t actual = request.prompt_token_ids[j + 1];
          result.prompt_logprobs.push_back(
              PromptLogprob{row[actual], top_logprobs(row, vocab, *request.prompt_logprobs)});
        }
      }
      const SampledToken token =
          sample_greedy(logprobs.narrow(0, last_row, 1), request.logprobs).front();
      result.tokens.push_back(token);
      const int64_t generated = static_cast<int64_t>(result.tokens.size());
      if (!request.ignore_eos && is_eos(limits, token.token_id)) {
        result.finish_reason = "stop";
      } else if (generated >= request.max_tokens) {
        result.finish_reason = "length";
      } else {
        next.push_back({.request_id = static_cast<int64_t>(r),
                        .new_token_ids = {token.token_id},
                        .num_computed_tokens = step[i].num_computed_tokens +
                                               static_cast<int64_t>(step[i].new_token_ids.size())});
        next_requests.push_back(r);
        continue;
      }
      blocks.free(static_cast<int64_t>(r));
    }
    step = std::move(next);
    step_requests = std::move(next_requests);
  }
  return results;
}

}  // namespace pagoda
