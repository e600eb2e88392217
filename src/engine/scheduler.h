// Continuous batching over the block manager: every step, running requests first (in arrival
// order), then waiting ones, within a token budget and a sequence limit; prompts are chunked to
// fit the budget; prefix-cache hits skip computed tokens; when blocks run out the newest running
// request is preempted (its blocks freed, to be recomputed later). Integers only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = kDefaultMaxNumBatchedTokens;
  bool enable_prefix_caching = true;
  // Prompt tokens per step whose log-probabilities are computed: each needs a vocabulary-wide
  // logits row, so a request that asks for them has its prompt chunked to this many.
  int64_t max_prompt_logprob_tokens = 512;
  // Speculative decoding: drafts verified per decoding request and step (0: none). Each takes a
  // slot of the request's blocks and a token of the budget.
  int64_t num_speculative_tokens = 0;
};

// One request's share of a step: tokens [first, first + num_tokens) of its token_ids, then, when
// verifying drafts, the first num_drafts of its draft_token_ids at the positions that follow. (A
// draft model's chunk may start past its known tokens, at a draft it feeds back.)
struct ScheduledChunk {
  Request* request = nullptr;
  int64_t first = 0;  // the first token computed this step (== num_computed before it)
  int64_t num_tokens = 0;
  int64_t num_drafts = 0;

  int64_t total() const { return num_tokens + num_drafts; }  // the rows it puts in the step
  // The id of its row `i` (0 <= i < total()): the token at position first + i, a known one or,
  // past them, a draft.
  int32_t token(int64_t i) const {
    const int64_t position = first + i;
    const int64_t known = static_cast<int64_t>(request->token_ids.size());
    return position < known ? request->token_ids[position]
                            : request->draft_token_ids[position - known];
  }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& blocks);

  void add(Request* request);
  // Drops a request wherever it is, frees its blocks and marks it finished.
  void remove(Request* request);
  // This step's work; blocks for it are reserved. Empty only when nothing can run.
  std::vector<ScheduledChunk> schedule();
  // After the forward pass (with each chunk's num_tokens counting the drafts it kept, and
  // num_drafts 0): advances the chunks' requests, records their full blocks in the
  // prefix cache and frees sliding blocks out of reach.
  void complete(const std::vector<ScheduledChunk>& chunks);

  bool has_requests() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return preemptions_; }
  // Prefix-cache lookups, in tokens: looked up and found.
  int64_t prefix_query_tokens() const { return query_tokens_; }
  int64_t prefix_hit_tokens() const { return hit_tokens_; }

 private:
  void preempt(Request* request);
  // How many of `request`'s tokens from `first` on this step takes: what is left of the token
  // budget and, while its prompt's log-probabilities are computed, of `prompt_logprob_tokens`
  // (which it spends).
  int64_t chunk_tokens(const Request& request, int64_t first, int64_t budget,
                       int64_t& prompt_logprob_tokens) const;
  // Drafts to verify after a decoding request's next token, within `budget` tokens of the step:
  // none without a drafter or unless its last token is the only one left to compute (a decode),
  // and never more than can still be kept before max_tokens.
  int64_t drafts_for(const Request& request, int64_t budget) const;
  void release_blocks(Request* request);  // frees its row and blocks, if it holds any

  SchedulerConfig config_;
  KvCacheManager& blocks_;
  std::vector<KvCacheManager::ComputedRow> computed_;  // complete()'s, reused across steps
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  int64_t preemptions_ = 0;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace pagoda
