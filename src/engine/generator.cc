#include "engine/generator.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

void validate(const GeneratorConfig& config, const std::vector<GenerationRequest>& requests) {
  for (size_t r = 0; r < requests.size(); ++r) {
    const GenerationRequest& request = requests[r];
    const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
    if (prompt == 0) fail("request {} has an empty prompt", r);
    for (int32_t id : request.prompt_token_ids) {
      if (id < 0 || id >= config.vocab_size) {
        fail("request {} has token id {}; the vocabulary has ids 0..{}", r, id,
             config.vocab_size - 1);
      }
    }
    try {
      request.params.validate(config.vocab_size);
    } catch (const Error& error) {
      fail("request {}: {}", r, error.what());
    }
    if (prompt + request.params.max_tokens > config.max_model_len) {
      fail("request {}: prompt of {} tokens plus max_tokens {} exceeds max_model_len {}", r, prompt,
           request.params.max_tokens, config.max_model_len);
    }
  }
}

bool contains(const auto& ids, int64_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

// The next token of one request from its raw logits row.
SampledToken next_token(const float* logits, const float* logprobs, int64_t vocab,
                        const GenerationRequest& request, const GenerationResult& result,
                        const GeneratorConfig& config, SamplerRng& rng) {
  const SamplingParams& params = request.params;
  std::vector<float> processed(logits, logits + vocab);
  std::vector<int32_t> output;
  for (const SampledToken& token : result.tokens)
    output.push_back(token.token_id);
  apply_penalties(processed.data(), vocab, request.prompt_token_ids, output, params);
  if (static_cast<int64_t>(output.size()) < params.min_tokens) {
    for (int64_t id : config.eos_token_ids) {
      if (id >= 0 && id < vocab) processed[id] = -INFINITY;
    }
    for (int32_t id : params.stop_token_ids)
      processed[id] = -INFINITY;
  }
  const int32_t token = sample_token(processed.data(), vocab, params, rng);
  return {token, logprobs[token], top_logprobs(logprobs, vocab, params.logprobs)};
}

}  // namespace

std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const GeneratorConfig& config,
                                       const std::vector<GenerationRequest>& requests) {
  validate(config, requests);
  KvCacheManager blocks(plan);
  ModelRunner runner(model, plan, cache);
  std::vector<GenerationResult> results(requests.size());
  std::vector<SamplerRng> rngs;
  std::vector<ScheduledSequence> step;
  std::vector<size_t> step_requests;
  for (size_t r = 0; r < requests.size(); ++r) {
    const GenerationRequest& request = requests[r];
    rngs.emplace_back(request.params.seed.value_or(config.seed * 0x9e3779b97f4a7c15ull + r));
    results[r].prompt_token_ids = request.prompt_token_ids;
    const int64_t total =
        static_cast<int64_t>(request.prompt_token_ids.size()) + request.params.max_tokens;
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
                    .all_logits = request.params.prompt_logprobs.has_value()});
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
      const SamplingParams& params = request.params;
      GenerationResult& result = results[r];
      const int64_t last_row = output.first_row[i] + output.num_rows[i] - 1;
      if (step[i].all_logits) {
        // Row j predicts prompt token j + 1.
        result.prompt_logprobs.assign(1, std::nullopt);
        for (int64_t j = 0; j + 1 < output.num_rows[i]; ++j) {
          const float* row = logprobs.data<float>() + (output.first_row[i] + j) * vocab;
          const int32_t actual = request.prompt_token_ids[j + 1];
          result.prompt_logprobs.push_back(
              PromptLogprob{row[actual], top_logprobs(row, vocab, *params.prompt_logprobs)});
        }
      }
      const SampledToken token = next_token(output.logits.data<float>() + last_row * vocab,
                                            logprobs.data<float>() + last_row * vocab, vocab,
                                            request, result, config, rngs[r]);
      result.tokens.push_back(token);
      const int64_t generated = static_cast<int64_t>(result.tokens.size());
      if ((!params.ignore_eos && contains(config.eos_token_ids, token.token_id)) ||
          contains(params.stop_token_ids, token.token_id)) {
        result.finish_reason = "stop";
      } else if (generated >= params.max_tokens) {
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
