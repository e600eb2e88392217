// Per-request block tables over one block pool: a request holds, in every KV cache group, the
// blocks that cover its tokens. Tables are persistent: each group keeps one row-major buffer with a
// row per request holding blocks, so a step's attention metadata points at rows instead of copying
// them, and each step writes only the blocks it adds or frees.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

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
  // Whether a request that holds no blocks yet can start on `hit` and then hold `num_tokens`
  // tokens: the hit's blocks that sit free in the pool count against the free blocks, as do the
  // blocks it adds. Pure.
  bool can_allocate(const PrefixHit& hit, int64_t num_tokens) const;
  // Starts request `id` on a hit: its tables begin with the hit's blocks, which gain a reference.
  void adopt_prefix(int64_t id, const PrefixHit& hit);
  // Records the full blocks among request `id`'s first `num_computed` tokens in the prefix cache.
  void cache_full_blocks(int64_t id, std::span<const int32_t> tokens, int64_t num_computed,
                         std::span<const uint64_t> extra_keys);

  // Whether the pool has the blocks request `id` needs to cover `num_tokens` tokens. Pure.
  bool can_allocate(int64_t id, int64_t num_tokens) const {
    return pool_.can_allocate(blocks_needed(id, num_tokens));
  }
  // Extends request `id`'s blocks in every group to cover `num_tokens` tokens. Requires
  // can_allocate(id, num_tokens) (InternalError otherwise).
  void allocate_slots(int64_t id, int64_t num_tokens);
  // Blocks a request would need in total, over all groups, to hold `num_tokens` tokens.
  int64_t blocks_needed(int64_t id, int64_t num_tokens) const;
  // Frees request `id`'s sliding-group blocks that no query from position `num_computed` on can
  // reach; they become the null block in its tables.
  void free_outside_window(int64_t id, int64_t num_computed);
  // Returns every block of request `id` to the pool.
  void free(int64_t id);
  // Block ids of request `id` in group `group`, in token order (the null block where freed).
  std::span<const int32_t> block_ids(int64_t id, int64_t group) const;
  // Group `group`'s tables: row r holds its request's block ids from data[r * stride] on; entries
  // past a request's blocks are meaningless. Valid until the next call that allocates.
  std::span<const int32_t> table_data(int64_t group) const { return tables_[group]; }
  int64_t table_stride(int64_t group) const { return strides_[group]; }
  // The row of request `id` in every group's table.
  int32_t table_row(int64_t id) const { return held(id).row; }
  int64_t num_free_blocks() const { return pool_.num_free(); }

 private:
  struct GroupState {
    int64_t num_blocks = 0;  // entries of the row in use
    int64_t num_freed = 0;   // leading entries already nulled by the window
    // Chained hashes of the full blocks recorded so far, so each step hashes only new blocks.
    std::vector<BlockHash> hashes;
  };
  struct Held {
    int32_t row = 0;
    std::vector<GroupState> groups;
  };

  const Held& held(int64_t id) const;
  Held& hold(int64_t id);  // the request's entry, made with a fresh row if it has none
  int32_t* row(int64_t group, int32_t row) { return tables_[group].data() + row * strides_[group]; }

  const KvCachePlan& plan_;
  BlockPool pool_;
  std::vector<int64_t> strides_;              // per group: blocks for max_model_len tokens
  std::vector<std::vector<int32_t>> tables_;  // per group: rows × stride
  std::vector<int32_t> free_rows_;
  int32_t num_rows_ = 0;
  std::unordered_map<int64_t, Held> held_;
  std::vector<int32_t> scratch_;  // blocks being freed, reused across calls
};

}  // namespace pagoda
