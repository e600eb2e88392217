// Per-request block tables over one block pool: a request holds, in every KV cache group, the
// blocks that cover its tokens.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

// Blocks a manager takes, over all groups, for a new request of `num_tokens` tokens. Every group
// keeps every block of a request for now (sliding groups included).
int64_t blocks_to_hold(const KvCachePlan& plan, int64_t num_tokens);

// A prefix-cache hit: how many leading tokens are already in the cache, and the blocks holding
// them per group (a sliding group has the null block where its window no longer reaches).
struct PrefixHit {
  int64_t num_tokens = 0;
  std::vector<std::vector<int32_t>> blocks;  // per group
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCachePlan& plan);

  // The longest cached prefix of `tokens` that every group holds: full groups need every block
  // from the start, sliding groups only the blocks their window reaches, contiguous up to the hit.
  // A hit never covers the last token (it must be computed to produce logits). `extra_keys` (a
  // salt) separate otherwise equal prompts.
  PrefixHit find_cached_prefix(std::span<const int32_t> tokens,
                               std::span<const uint64_t> extra_keys) const;
  // Starts request `id` on a hit: its tables begin with the hit's blocks, which gain a reference.
  void adopt_prefix(int64_t id, const PrefixHit& hit);
  // Records the full blocks among request `id`'s first `num_computed` tokens in the prefix cache.
  void cache_full_blocks(int64_t id, std::span<const int32_t> tokens, int64_t num_computed,
                         std::span<const uint64_t> extra_keys);

  // Extends request `id`'s blocks in every group to cover `num_tokens` tokens. Returns false and
  // allocates nothing when the pool has too few free blocks.
  bool allocate_slots(int64_t id, int64_t num_tokens);
  // Blocks a request would need in total, over all groups, to hold `num_tokens` tokens.
  int64_t blocks_needed(int64_t id, int64_t num_tokens) const;
  // Frees request `id`'s sliding-group blocks that no query from position `num_computed` on can
  // reach; they become the null block in its tables.
  void free_outside_window(int64_t id, int64_t num_computed);
  // Returns every block of request `id` to the pool.
  void free(int64_t id);
  // Block ids of request `id`, per group, in token order.
  const std::vector<std::vector<int32_t>>& block_ids(int64_t id) const;
  int64_t num_free_blocks() const { return pool_.num_free(); }

 private:
  const KvCachePlan& plan_;
  BlockPool pool_;
  std::map<int64_t, std::vector<std::vector<int32_t>>> tables_;
  // Per request and group: the chained hashes of the full blocks recorded so far, so each step
  // hashes only its new blocks.
  std::map<int64_t, std::vector<std::vector<BlockHash>>> hashes_;
};

}  // namespace pagoda
