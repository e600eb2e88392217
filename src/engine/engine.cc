#include "engine/engine.h"

#include <algorithm>

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
  // Compared without adding, so a max_tokens near 2^63 cannot wrap past the check.
  if (request.params.max_tokens > config.max_model_len - prompt) {
    fail("prompt of {} tokens plus max_tokens {} exceeds max_model_len {}", prompt,
         request.params.max_tokens, config.max_model_len);
  }
  const int64_t longest = prompt + request.params.max_tokens;
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

}  // namespace

Engine::Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
               const EngineConfig& config)
    : plan_(plan),
      config_(config),
      blocks_(plan),
      scheduler_(config.scheduler, blocks_),
      runner_(model, plan, cache, {.enforce_eager = config.enforce_eager}),
      sampler_({.eos_token_ids = config.eos_token_ids}) {
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
  const uint64_t stream = request.params.seed.value_or(config_.seed * 0x9e3779b97f4a7c15ull + id);
  counters_.prompt_tokens += static_cast<int64_t>(request.prompt_token_ids.size());
  Request& added = requests_
                       .try_emplace(id, id, std::move(request.prompt_token_ids),
                                    std::move(request.params), stream)
                       .first->second;
  scheduler_.add(&added);
  return id;
}

Request& Engine::find(int64_t id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) fail("no request {}", id);
  return it->second;
}

const Request& Engine::request(int64_t id) const {
  return const_cast<Engine*>(this)->find(id);
}

void Engine::abort(int64_t id) {
  Request& aborted = find(id);
  if (aborted.status == RequestStatus::kFinished) return;
  aborted.finish_reason = FinishReason::kAbort;
  scheduler_.remove(&aborted);
  aborted_.push_back(id);
}

RequestDelta Engine::fail_request(int64_t id, const std::string& error) {
  Request& failed = find(id);
  if (failed.status != RequestStatus::kFinished) {
    failed.finish_reason = FinishReason::kError;
    failed.error = error;
    scheduler_.remove(&failed);
  }
  return {.request_id = id, .finish_reason = failed.finish_reason, .error = failed.error};
}

void Engine::release(int64_t id) {
  if (status(id) != RequestStatus::kFinished) fail("request {} has not finished", id);
  requests_.erase(id);
}

GenerationStats Engine::stats() const {
  GenerationStats stats = counters_;
  stats.preemptions = scheduler_.num_preemptions();
  stats.prefix_query_tokens = scheduler_.prefix_query_tokens();
  stats.prefix_hit_tokens = scheduler_.prefix_hit_tokens();
  return stats;
}

std::vector<RequestDelta> Engine::step() {
  std::vector<RequestDelta> deltas = take_aborted();
  if (!scheduler_.has_requests()) return deltas;
  const std::vector<ScheduledChunk> chunks = scheduler_.schedule();
  PAGODA_CHECK(!chunks.empty(), "no request could be scheduled");
  counters_.peak_blocks_used = std::max(counters_.peak_blocks_used,
                                        plan_.num_blocks - kNullBlocks - blocks_.num_free_blocks());
  std::span<const std::optional<SampledToken>> tokens;
  try {
    sampler_.prepare(chunks, runner_.on_device());
    const RunnerOutput output = runner_.execute(chunks, sampler_.logits_rows(), blocks_);
    tokens = sampler_.sample(output.logits, output.first_row);
  } catch (const std::exception& error) {
    for (const ScheduledChunk& chunk : chunks)
      deltas.push_back(fail_request(chunk.request->id, error.what()));
    return deltas;
  }
  scheduler_.complete(chunks);
  ++counters_.steps;
  append_tokens(chunks, tokens, deltas);
  return deltas;
}

std::vector<RequestDelta> Engine::take_aborted() {
  std::vector<RequestDelta> deltas;
  for (int64_t id : aborted_)
    deltas.push_back({.request_id = id, .finish_reason = FinishReason::kAbort});
  aborted_.clear();
  return deltas;
}

void Engine::append_tokens(std::span<const ScheduledChunk> chunks,
                           std::span<const std::optional<SampledToken>> tokens,
                           std::vector<RequestDelta>& deltas) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!tokens[i]) continue;  // a chunk inside the prompt
    Request& request = *chunks[i].request;
    const SampledToken& token = *tokens[i];
    request.token_ids.push_back(token.token_id);
    request.output_logprobs.push_back({token.logprob, token.top});
    ++counters_.generated_tokens;
    request.finish_reason = finish_reason(request, token.token_id);
    if (request.finish_reason != FinishReason::kNone) scheduler_.remove(&request);
    RequestDelta& delta = deltas.emplace_back(RequestDelta{
        .request_id = request.id, .new_tokens = {token}, .finish_reason = request.finish_reason});
    if (request.params.prompt_logprobs && request.num_output_tokens() == 1) {
      delta.prompt_logprobs = request.prompt_logprobs;
    }
  }
}

FinishReason Engine::finish_reason(const Request& request, int32_t token) const {
  const SamplingParams& params = request.params;
  if ((!params.ignore_eos && contains(config_.eos_token_ids, token)) ||
      contains(params.stop_token_ids, token)) {
    return FinishReason::kStop;
  }
  if (request.num_output_tokens() >= params.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::vector<Request> generate(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
                              const EngineConfig& config,
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
  std::vector<Request> results;
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request& request = engine.request(static_cast<int64_t>(r));
    if (request.finish_reason == FinishReason::kError) fail("request {}: {}", r, request.error);
    results.push_back(request);
  }
  if (stats != nullptr) *stats = engine.stats();
  return results;
}

}  // namespace pagoda
