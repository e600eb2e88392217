#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& blocks)
    : config_(config), blocks_(blocks) {
  if (config.max_num_seqs < 1)
    fail("max_num_seqs is {}; it must be at least 1", config.max_num_seqs);
  if (config.max_num_batched_tokens < 1) {
    fail("max_num_batched_tokens is {}; it must be at least 1", config.max_num_batched_tokens);
  }
  if (config.num_speculative_tokens < 0) {
    fail("num_speculative_tokens is {}; it must be at least 0", config.num_speculative_tokens);
  }
  if (config.max_prompt_logprob_tokens < 1) {
    fail("max_prompt_logprob_tokens is {}; it must be at least 1",
         config.max_prompt_logprob_tokens);
  }
}

void Scheduler::add(Request* request) {
  request->status = RequestStatus::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::remove(Request* request) {
  if (request->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), request));
  } else if (request->status != RequestStatus::kFinished) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
  }
  release_blocks(request);
  request->status = RequestStatus::kFinished;
}

void Scheduler::release_blocks(Request* request) {
  if (request->kv_row < 0) return;
  blocks_.free(request->kv_row);
  request->kv_row = -1;
}

void Scheduler::preempt(Request* request) {
  release_blocks(request);
  request->num_computed = 0;
  request->draft_computed = 0;
  request->status = RequestStatus::kPreempted;
  waiting_.push_front(request);
  ++preemptions_;
}

int64_t Scheduler::chunk_tokens(const Request& request, int64_t first, int64_t budget,
                                int64_t& prompt_logprob_tokens) const {
  int64_t count = std::min(request.num_tokens() - first, budget);
  if (request.prompt_logprob_rows(first)) {
    count = std::min(count, prompt_logprob_tokens);
    prompt_logprob_tokens -= count;
  }
  return count;
}

int64_t Scheduler::drafts_for(const Request& request, int64_t budget) const {
  if (config_.num_speculative_tokens == 0 || request.num_computed + 1 != request.num_tokens()) {
    return 0;
  }
  // Kept drafts and the token after them all count against max_tokens.
  const int64_t left = request.params.max_tokens - request.num_output_tokens() - 1;
  return std::max<int64_t>(0, std::min({config_.num_speculative_tokens, budget, left}));
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> chunks;
  int64_t budget = config_.max_num_batched_tokens;
  int64_t prompt_logprob_tokens = config_.max_prompt_logprob_tokens;
  bool preempted = false;
  // Running requests, oldest first; the newest are preempted when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* request = running_[i];
    const int64_t count =
        chunk_tokens(*request, request->num_computed, budget, prompt_logprob_tokens);
    if (count == 0) {  // its prompt's log-probabilities wait for the next step
      ++i;
      continue;
    }
    // Drafts leave a token of the budget for each running request after this one.
    const int64_t later = static_cast<int64_t>(running_.size() - i - 1);
    int64_t drafts = drafts_for(*request, budget - count - later);
    int64_t slots = request->num_computed + count + drafts;
    bool scheduled = true;
    while (!blocks_.can_allocate(request->kv_row, slots)) {
      if (drafts > 0) {  // drafts never cost another request its blocks
        slots -= drafts;
        drafts = 0;
        continue;
      }
      Request* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      preempted = true;
      if (victim == request) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    blocks_.allocate_slots(request->kv_row, slots);
    chunks.push_back({request, request->num_computed, count, drafts});
    budget -= count + drafts;
    ++i;
  }
  // Waiting requests in arrival order (preempted ones first), unless this step preempted. Each is
  // checked before anything is taken for it, so one that does not fit leaves no trace.
  while (!preempted && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* request = waiting_.front();
    const bool lookup =
        config_.enable_prefix_caching && request->cacheable() && request->num_computed == 0;
    const PrefixHit hit = lookup ? blocks_.find_cached_prefix(request->token_ids, {}) : PrefixHit{};
    const int64_t first = request->num_computed + hit.num_tokens;
    const int64_t count = chunk_tokens(*request, first, budget, prompt_logprob_tokens);
    if (count == 0 || !blocks_.can_allocate(hit, first + count)) break;
    if (lookup) {
      query_tokens_ += request->num_tokens();
      hit_tokens_ += hit.num_tokens;
    }
    request->kv_row = blocks_.add_request();
    if (hit.num_tokens > 0) blocks_.adopt_prefix(request->kv_row, hit);
    blocks_.allocate_slots(request->kv_row, first + count);
    request->num_computed = first;
    request->draft_computed = first;  // a prefix hit brings a draft model's K/V with the target's
    waiting_.pop_front();
    running_.push_back(request);
    request->status = RequestStatus::kRunning;
    chunks.push_back({request, first, count});
    budget -= count;
  }
  return chunks;
}

void Scheduler::complete(const std::vector<ScheduledChunk>& chunks) {
  computed_.clear();
  for (const ScheduledChunk& chunk : chunks) {
    Request& request = *chunk.request;
    request.num_computed = chunk.first + chunk.num_tokens;
    computed_.push_back({request.kv_row, request.token_ids, request.num_computed, {}});
  }
  blocks_.computed(computed_, config_.enable_prefix_caching);
}

}  // namespace pagoda
