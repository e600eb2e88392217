#include "engine/engine.h"

#include <algorithm>
#include <chrono>

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

EngineConfig with_speculation(EngineConfig config, int64_t num_speculative_tokens) {
  config.scheduler.num_speculative_tokens = num_speculative_tokens;
  return config;
}

}  // namespace

double GenerationStats::spec_acceptance_rate() const {
  return spec_draft_tokens == 0 ? 0.0
                                : static_cast<double>(spec_accepted_tokens) / spec_draft_tokens;
}

double GenerationStats::spec_mean_acceptance_length() const {
  return spec_rounds == 0 ? 0.0 : 1.0 + static_cast<double>(spec_accepted_tokens) / spec_rounds;
}

Engine::Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
               const EngineConfig& config, Drafter* drafter)
    : Engine(WithoutProposer{}, model, plan, cache, config,
             drafter != nullptr ? drafter->config.num_speculative_tokens : 0) {
  if (drafter == nullptr) return;
  // Every rank drafts with its shard of the drafter.
  std::vector<RankShard> ranks{{.model = &model,
                                .cache = &cache,
                                .communicator = config.communicator,
                                .context_communicator = config.context_communicator,
                                .drafter = drafter}};
  ranks.insert(ranks.end(), config.other_ranks.begin(), config.other_ranks.end());
  proposer_ = make_proposer(ranks, plan, ranks_.get(), config.enforce_eager, config.eos_token_ids);
}

Engine::Engine(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
               const EngineConfig& config, std::unique_ptr<Proposer> proposer,
               int64_t num_speculative_tokens)
    : Engine(WithoutProposer{}, model, plan, cache, config, proposer ? num_speculative_tokens : 0) {
  if (proposer && ranks_) fail("a proposer of one's own does not run with several ranks");
  proposer_ = std::move(proposer);
}

Engine::Engine(WithoutProposer, CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
               const EngineConfig& config, int64_t num_speculative_tokens)
    : plan_(plan),
      config_(with_speculation(config, num_speculative_tokens)),
      blocks_(plan),
      scheduler_(config_.scheduler, blocks_),
      runner_(model, plan, cache, {.enforce_eager = config.enforce_eager}),
      sampler_({.eos_token_ids = config.eos_token_ids}) {
  if (config.scheduler.max_num_batched_tokens > plan.max_tokens_per_step) {
    fail(
        "max_num_batched_tokens {} is larger than the {} tokens per step the KV cache was planned "
        "for",
        config.scheduler.max_num_batched_tokens, plan.max_tokens_per_step);
  }
  if (num_speculative_tokens > 0) {
    counters_.spec_accepted_per_position.assign(num_speculative_tokens, 0);
  }
  if (!config_.other_ranks.empty()) {
    PAGODA_CHECK(config_.communicator != nullptr,
                 "tensor-parallel ranks without rank 0's communicator");
    ranks_ = std::make_unique<RankRunners>(config_.other_ranks, *config_.communicator,
                                           config_.context_communicator, plan,
                                           RunnerOptions{.enforce_eager = config.enforce_eager});
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
  std::span<const std::vector<SampledToken>> tokens;
  try {
    if (proposer_) {
      const auto start = std::chrono::steady_clock::now();
      proposer_->propose(chunks, blocks_);
      if (std::any_of(chunks.begin(), chunks.end(),
                      [](const ScheduledChunk& c) { return c.num_drafts > 0; })) {
        counters_.spec_draft_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    sampler_.prepare(chunks, runner_.on_device());
    const RunnerOutput output =
        ranks_ ? ranks_->execute(runner_, chunks, sampler_.logits_rows(), blocks_)
               : runner_.execute(chunks, sampler_.logits_rows(), blocks_);
    tokens = sampler_.sample(output.logits, output.first_row);
    if (proposer_) proposer_->after_step(chunks, tokens, sampler_.logits_rows(), output, blocks_);
  } catch (const std::exception& error) {
    for (const ScheduledChunk& chunk : chunks)
      deltas.push_back(fail_request(chunk.request->id, error.what()));
    return deltas;
  }
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
                           std::span<const std::vector<SampledToken>> tokens,
                           std::vector<RequestDelta>& deltas) {
  std::vector<ScheduledChunk> completed(chunks.begin(), chunks.end());
  std::vector<Request*> finished;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (tokens[i].empty()) continue;  // a chunk inside the prompt
    Request& request = *chunks[i].request;
    RequestDelta& delta = deltas.emplace_back(RequestDelta{.request_id = request.id});
    for (const SampledToken& token : tokens[i]) {
      request.token_ids.push_back(token.token_id);
      request.output_logprobs.push_back({token.logprob, token.top});
      delta.new_tokens.push_back(token);
      ++counters_.generated_tokens;
      request.finish_reason = finish_reason(request, token.token_id);
      if (request.finish_reason != FinishReason::kNone) break;  // the rest of the run is dropped
    }
    delta.finish_reason = request.finish_reason;
    if (request.finish_reason != FinishReason::kNone) finished.push_back(&request);
    if (request.params.prompt_logprobs &&
        request.num_output_tokens() == static_cast<int64_t>(delta.new_tokens.size())) {
      delta.prompt_logprobs = request.prompt_logprobs;
    }
    const int64_t drafts = chunks[i].num_drafts;
    if (drafts == 0) continue;
    // The kept drafts: their K/V, written in the verify step, join the computed tokens.
    const int64_t accepted = static_cast<int64_t>(tokens[i].size()) - 1;
    completed[i].num_tokens += std::min(accepted, static_cast<int64_t>(delta.new_tokens.size()));
    completed[i].num_drafts = 0;
    ++counters_.spec_rounds;
    counters_.spec_draft_tokens += drafts;
    counters_.spec_accepted_tokens += accepted;
    for (int64_t j = 0; j < accepted; ++j)
      ++counters_.spec_accepted_per_position[j];
  }
  scheduler_.complete(completed);
  for (Request* request : finished)
    scheduler_.remove(request);
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
                              GenerationStats* stats, Drafter* drafter) {
  Engine engine(model, plan, cache, config, drafter);
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
