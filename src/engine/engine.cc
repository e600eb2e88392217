#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

void check_request(const EngineConfig& config, const KvCachePlan& plan,
                   const GenerationRequest& request) {
  const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  if (prompt == 0) fail("empty prompt");
  for (int32_t id : request.prompt_token_ids) {
    if (id < 0 || id >= config.vocab_size) {
      fail("token id {}; the vocabulary has ids 0..{}", id, config.vocab_size - 1);
    }
  }
  request.params.validate(config.vocab_size);
  const int64_t longest = prompt + request.params.max_tokens;
  if (longest > config.max_model_len) {
    fail("prompt of {} tokens plus max_tokens {} exceeds max_model_len {}", prompt,
         request.params.max_tokens, config.max_model_len);
  }
  const int64_t needed = plan.blocks_for_sequence(longest);
  if (needed > plan.num_blocks - kNullBlocks) {
    fail(
        "it may need {} KV blocks for {} tokens; the pool has {}: raise --kv-cache-memory or "
        "lower max_tokens",
        needed, longest, plan.num_blocks - kNullBlocks);
  }
}

bool contains(const auto& ids, int64_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

// Whether a request's next token depends on its logits alone: no penalties, alternatives or
// prompt log-probabilities, and no minimum length still ruling out EOS.
bool samples_from_logits(const SamplingParams& params, int64_t generated) {
  return params.presence_penalty == 0.0 && params.frequency_penalty == 0.0 &&
         params.repetition_penalty == 1.0 && params.logprobs == 0 &&
         generated >= params.min_tokens && !params.prompt_logprobs.has_value();
}

// The next token of one request from its raw logits row.
SampledToken next_token(const float* logits, const float* logprobs, int64_t vocab,
                        const GenerationRequest& request, const GenerationResult& result,
                        const EngineConfig& config, SamplerRng& rng) {
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

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "";
}

Engine::Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
               const EngineConfig& config)
    : plan_(plan),
      config_(config),
      blocks_(plan),
      scheduler_(config.scheduler, blocks_),
      runner_(model, plan, cache, {.enforce_eager = config.enforce_eager}) {
  if (config.scheduler.max_num_batched_tokens > plan.max_tokens_per_step) {
    fail(
        "max_num_batched_tokens {} is larger than the {} tokens per step the KV cache was planned "
        "for",
        config.scheduler.max_num_batched_tokens, plan.max_tokens_per_step);
  }
}

void Engine::validate(const GenerationRequest& request) const {
  check_request(config_, plan_, request);
}

int64_t Engine::add_request(GenerationRequest request) {
  validate(request);
  const int64_t id = next_id_++;
  Entry& entry = entries_[id];
  entry.rng = SamplerRng(request.params.seed.value_or(config_.seed * 0x9e3779b97f4a7c15ull + id));
  entry.result.prompt_token_ids = request.prompt_token_ids;
  if (request.params.prompt_logprobs) entry.result.prompt_logprobs.assign(1, std::nullopt);
  entry.state = {.id = id,
                 .tokens = request.prompt_token_ids,
                 .cacheable = !request.params.prompt_logprobs.has_value()};
  counters_.prompt_tokens += static_cast<int64_t>(request.prompt_token_ids.size());
  entry.request = std::move(request);
  scheduler_.add(&entry.state);
  return id;
}

const Engine::Entry& Engine::entry(int64_t id) const {
  const auto it = entries_.find(id);
  if (it == entries_.end()) fail("no request {}", id);
  return it->second;
}

void Engine::abort(int64_t id) {
  Entry& aborted = const_cast<Entry&>(entry(id));
  if (aborted.state.status == RequestStatus::kFinished) return;
  aborted.result.finish_reason = FinishReason::kAbort;
  scheduler_.remove(&aborted.state);
  aborted_.push_back(id);
}

const GenerationResult& Engine::result(int64_t id) const {
  return entry(id).result;
}

RequestStatus Engine::status(int64_t id) const {
  return entry(id).state.status;
}

void Engine::release(int64_t id) {
  if (status(id) != RequestStatus::kFinished) fail("request {} has not finished", id);
  entries_.erase(id);
}

GenerationStats Engine::stats() const {
  GenerationStats stats = counters_;
  stats.preemptions = scheduler_.num_preemptions();
  stats.prefix_query_tokens = scheduler_.prefix_query_tokens();
  stats.prefix_hit_tokens = scheduler_.prefix_hit_tokens();
  return stats;
}

std::vector<RequestDelta> Engine::step() {
  std::vector<RequestDelta> deltas;
  for (int64_t id : aborted_)
    deltas.push_back({.request_id = id, .finish_reason = FinishReason::kAbort});
  aborted_.clear();
  if (!scheduler_.has_requests()) return deltas;
  const std::vector<ScheduledChunk> chunks = scheduler_.schedule();
  PAGODA_CHECK(!chunks.empty(), "no request could be scheduled");
  std::vector<ScheduledSequence> step;
  for (const ScheduledChunk& chunk : chunks) {
    const SchedulerRequest& state = *chunk.request;
    const GenerationRequest& request = entries_.at(state.id).request;
    const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
    step.push_back(
        {.request_id = state.id,
         .new_token_ids =
             std::vector<int32_t>(state.tokens.begin() + chunk.first,
                                  state.tokens.begin() + chunk.first + chunk.num_tokens),
         .num_computed_tokens = chunk.first,
         .all_logits = request.params.prompt_logprobs.has_value() && chunk.first + 1 < prompt});
  }
  counters_.peak_blocks_used = std::max(counters_.peak_blocks_used,
                                        plan_.num_blocks - kNullBlocks - blocks_.num_free_blocks());
  // A step whose every row takes its token from its logits alone is sampled where its logits
  // are, with each row's draw taken from its request's stream here. A chunk that ends inside its
  // prompt draws nothing.
  bool on_device = runner_.on_device();
  for (size_t i = 0; i < chunks.size() && on_device; ++i) {
    const Entry& entry = entries_.at(chunks[i].request->id);
    on_device =
        !step[i].all_logits &&
        samples_from_logits(entry.request.params, static_cast<int64_t>(entry.result.tokens.size()));
  }
  StepOptions options;
  for (size_t i = 0; i < chunks.size() && on_device; ++i) {
    Entry& entry = entries_.at(chunks[i].request->id);
    const SamplingParams& params = entry.request.params;
    const bool emits = chunks[i].first + chunks[i].num_tokens >=
                       static_cast<int64_t>(chunks[i].request->tokens.size());
    SamplingRow row;
    if (emits && !params.greedy()) {
      row = {.temperature = params.temperature,
             .top_p = params.top_p,
             .min_p = params.min_p,
             .uniform = entry.rng.uniform(),
             .top_k = std::max<int64_t>(params.top_k, 0)};
    }
    options.device_sampling.push_back(row);
  }
  const RunnerOutput output = runner_.execute(step, blocks_, options);
  scheduler_.complete(chunks);
  ++counters_.steps;
  const bool sampled = !output.sampled_ids.empty();
  const Tensor logprobs = sampled ? Tensor() : compute_logprobs(output.logits);
  const int64_t vocab = sampled ? 0 : logprobs.size(1);
  for (size_t i = 0; i < chunks.size(); ++i) {
    SchedulerRequest& state = *chunks[i].request;
    Entry& entry = entries_.at(state.id);
    const GenerationRequest& request = entry.request;
    const SamplingParams& params = request.params;
    GenerationResult& result = entry.result;
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
    const SampledToken token =
        sampled ? SampledToken{output.sampled_ids[last_row], output.sampled_logprobs[last_row], {}}
                : next_token(output.logits.data<float>() + last_row * vocab,
                             logprobs.data<float>() + last_row * vocab, vocab, request, result,
                             config_, entry.rng);
    result.tokens.push_back(token);
    state.tokens.push_back(token.token_id);
    ++counters_.generated_tokens;
    RequestDelta delta{.request_id = state.id, .new_tokens = {token}};
    const int64_t generated = static_cast<int64_t>(result.tokens.size());
    if ((!params.ignore_eos && contains(config_.eos_token_ids, token.token_id)) ||
        contains(params.stop_token_ids, token.token_id)) {
      result.finish_reason = FinishReason::kStop;
    } else if (generated >= params.max_tokens) {
      result.finish_reason = FinishReason::kLength;
    }
    if (result.finish_reason != FinishReason::kNone) {
      delta.finish_reason = result.finish_reason;
      scheduler_.remove(&state);
    }
    deltas.push_back(std::move(delta));
  }
  return deltas;
}

std::vector<GenerationResult> generate(CausalLm& model, const KvCachePlan& plan,
                                       const KvCache& cache, const EngineConfig& config,
                                       const std::vector<GenerationRequest>& requests,
                                       GenerationStats* stats) {
  Engine engine(model, plan, cache, config);
  for (size_t r = 0; r < requests.size(); ++r) {
    try {
      engine.add_request(requests[r]);
    } catch (const Error& error) {
      fail("request {}: {}", r, error.what());
    }
  }
  while (engine.has_unfinished())
    engine.step();
  PAGODA_CHECK(engine.num_free_blocks() == plan.num_blocks - kNullBlocks,
               "{} KV blocks were not returned",
               plan.num_blocks - kNullBlocks - engine.num_free_blocks());
  std::vector<GenerationResult> results;
  for (size_t r = 0; r < requests.size(); ++r) {
    results.push_back(engine.result(static_cast<int64_t>(r)));
  }
  if (stats != nullptr) *stats = engine.stats();
  return results;
}

}  // namespace pagoda
