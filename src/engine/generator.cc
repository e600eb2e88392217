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
                                       const std::vector<GenerationRequest>& requests,
                                       GenerationStats* stats) {
  validate(config, requests);
  for (size_t r = 0; r < requests.size(); ++r) {
    const int64_t longest =
        static_cast<int64_t>(requests[r].prompt_token_ids.size()) + requests[r].params.max_tokens;
    const int64_t needed = blocks_to_hold(plan, longest);
    if (needed > plan.num_blocks - kNullBlocks) {
      fail(
          "request {} may need {} KV blocks for {} tokens; the pool has {}: raise "
          "--kv-cache-memory or lower max_tokens",
          r, needed, longest, plan.num_blocks - kNullBlocks);
    }
  }
  KvCacheManager blocks(plan);
  Scheduler scheduler(config.scheduler, blocks);
  ModelRunner runner(model, plan, cache);
  GenerationStats counters;
  std::vector<GenerationResult> results(requests.size());
  std::vector<SchedulerRequest> states(requests.size());
  std::vector<SamplerRng> rngs;
  for (size_t r = 0; r < requests.size(); ++r) {
    const GenerationRequest& request = requests[r];
    rngs.emplace_back(request.params.seed.value_or(config.seed * 0x9e3779b97f4a7c15ull + r));
    results[r].prompt_token_ids = request.prompt_token_ids;
    if (request.params.prompt_logprobs) results[r].prompt_logprobs.assign(1, std::nullopt);
    states[r] = {.id = static_cast<int64_t>(r),
                 .tokens = request.prompt_token_ids,
                 .cacheable = !request.params.prompt_logprobs.has_value()};
    scheduler.add(&states[r]);
    counters.prompt_tokens += static_cast<int64_t>(request.prompt_token_ids.size());
  }

  while (scheduler.has_requests()) {
    const std::vector<ScheduledChunk> chunks = scheduler.schedule();
    PAGODA_CHECK(!chunks.empty(), "no request could be scheduled");
    std::vector<ScheduledSequence> step;
    for (const ScheduledChunk& chunk : chunks) {
      const SchedulerRequest& state = *chunk.request;
      const GenerationRequest& request = requests[state.id];
      const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
      step.push_back(
          {.request_id = state.id,
           .new_token_ids =
               std::vector<int32_t>(state.tokens.begin() + chunk.first,
                                    state.tokens.begin() + chunk.first + chunk.num_tokens),
           .num_computed_tokens = chunk.first,
           .all_logits = request.params.prompt_logprobs.has_value() && chunk.first + 1 < prompt});
    }
    counters.peak_blocks_used = std::max(counters.peak_blocks_used,
                                         plan.num_blocks - kNullBlocks - blocks.num_free_blocks());
    const RunnerOutput output = runner.execute(step, blocks);
    scheduler.complete(chunks);
    ++counters.steps;
    const Tensor logprobs = compute_logprobs(output.logits);
    const int64_t vocab = logprobs.size(1);
    for (size_t i = 0; i < chunks.size(); ++i) {
      SchedulerRequest& state = *chunks[i].request;
      const GenerationRequest& request = requests[state.id];
      const SamplingParams& params = request.params;
      GenerationResult& result = results[state.id];
      const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
      if (step[i].all_logits) {
        // Row j holds position first + j, which predicts prompt token first + j + 1.
        for (int64_t j = 0; j < output.num_rows[i]; ++j) {
          const int64_t predicted = chunks[i].first + j + 1;
          if (predicted >= prompt ||
              static_cast<int64_t>(result.prompt_logprobs.size()) != predicted) {
            continue;  // past the prompt, or recorded before a preemption
          }
          const float* row = logprobs.data<float>() + (output.first_row[i] + j) * vocab;
          result.prompt_logprobs.push_back(
              PromptLogprob{row[request.prompt_token_ids[predicted]],
                            top_logprobs(row, vocab, *params.prompt_logprobs)});
        }
      }
      if (state.num_computed < static_cast<int64_t>(state.tokens.size())) continue;  // a chunk
      const int64_t last_row = output.first_row[i] + output.num_rows[i] - 1;
      const SampledToken token = next_token(output.logits.data<float>() + last_row * vocab,
                                            logprobs.data<float>() + last_row * vocab, vocab,
                                            request, result, config, rngs[state.id]);
      result.tokens.push_back(token);
      state.tokens.push_back(token.token_id);
      ++counters.generated_tokens;
      const int64_t generated = static_cast<int64_t>(result.tokens.size());
      if ((!params.ignore_eos && contains(config.eos_token_ids, token.token_id)) ||
          contains(params.stop_token_ids, token.token_id)) {
        result.finish_reason = "stop";
      } else if (generated >= params.max_tokens) {
        result.finish_reason = "length";
      } else {
        continue;
      }
      scheduler.remove(state.id);
    }
  }
  counters.preemptions = scheduler.num_preemptions();
  counters.prefix_query_tokens = scheduler.prefix_query_tokens();
  counters.prefix_hit_tokens = scheduler.prefix_hit_tokens();
  PAGODA_CHECK(blocks.num_free_blocks() == plan.num_blocks - kNullBlocks,
               "{} KV blocks were not returned",
               plan.num_blocks - kNullBlocks - blocks.num_free_blocks());
  if (stats != nullptr) *stats = counters;
  return results;
}

}  // namespace pagoda
