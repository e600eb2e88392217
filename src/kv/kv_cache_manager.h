// Per-request block tables over one block pool: a request holds, in every KV cache group, the
// blocks that cover its tokens. Tables are persistent: each group keeps one row-major buffer with a
// row per request holding blocks, so a step's attention metadata points at rows instead of copying
// them, and each step writes only the blocks it adds or frees into the host tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

// A prefix-cache hit: how many leading tokens are already in the cache, and the blocks holding
// them per group (a sliding group has the null block where its window no longer reaches).
struct PrefixHit {
  int64_t num_tokens = 0;
  std::vector<std::vector<int32_t>> blocks;  // per group
};

// Requests are known here by their row: add_request() hands one out, every other call names it,
// and free() gives it back. A request keeps its row while it holds blocks, so a step finds its
// state and its block-table row without a lookup.
class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCachePlan& plan);

  // A row for a new request, holding no blocks. Valid until free(row).
  int32_t add_request();
  // Returns every block of `row` to the pool and frees the row.
  void free(int32_t row);

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
  // Starts `row` (which holds no blocks) on a hit: its tables begin with the hit's blocks, which
  // gain a reference.
  void adopt_prefix(int32_t row, const PrefixHit& hit);

  // Whether the pool has the blocks `row` needs to cover `num_tokens` tokens. Pure.
  bool can_allocate(int32_t row, int64_t num_tokens) const {
    return pool_.can_allocate(blocks_needed(row, num_tokens));
  }
  // Extends `row`'s blocks in every group to cover `num_tokens` tokens. Requires
  // can_allocate(row, num_tokens) (InternalError otherwise).
  void allocate_slots(int32_t row, int64_t num_tokens);
  // Blocks `row` would add, over all groups, to hold `num_tokens` tokens.
  int64_t blocks_needed(int32_t row, int64_t num_tokens) const;

  // After a step: each row's tokens are computed up to `num_computed`. Caches their full blocks
  // (when `cache_full_blocks`, as cache_full_blocks() does) and frees what their windows no longer
  // reach (as free_outside_window() does). Most rows fill and free no block in a decode step; each
  // row remembers the length at which it next will, so those cost one comparison.
  struct ComputedRow {
    int32_t row;
    std::span<const int32_t> tokens;
    int64_t num_computed;
    std::span<const uint64_t> extra_keys;
  };
  void computed(std::span<const ComputedRow> rows, bool cache_full_blocks);
  // Records the full blocks among `row`'s first `num_computed` tokens in the prefix cache.
  void cache_full_blocks(int32_t row, std::span<const int32_t> tokens, int64_t num_computed,
                         std::span<const uint64_t> extra_keys);
  // Frees `row`'s sliding-group blocks that no query from position `num_computed` on can reach;
  // they become the null block in its tables.
  void free_outside_window(int32_t row, int64_t num_computed);

  // Block ids of `row` in group `group`, in token order (the null block where freed).
  std::span<const int32_t> block_ids(int32_t row, int64_t group) const;
  // Group `group`'s tables: row r holds its request's block ids from data[r * stride] on; entries
  // past a request's blocks are meaningless. Valid until add_request() adds rows or
  // allocate_slots() / adopt_prefix() widen them. Rows start kMaxInitialTableBlocks wide at most
  // and widen (doubling, up to max_model_len's blocks) as a request's blocks need, so a model
  // with only sliding-window layers and a huge max_model_len keeps tables its requests' length.
  static constexpr int64_t kMaxInitialTableBlocks = 16384;
  std::span<const int32_t> table_data(int64_t group) const { return tables_[group]; }
  int64_t table_stride(int64_t group) const { return strides_[group]; }
  int64_t num_free_blocks() const { return pool_.num_free(); }

 private:
  struct GroupState {
    int64_t num_blocks = 0;  // entries of the row in use
    int64_t num_freed = 0;   // leading entries already nulled by the window
    // Chained hashes of the full blocks hashed so far, so each step hashes only new blocks.
    std::vector<BlockHash> hashes;
    int64_t num_recorded = 0;  // leading hashed blocks offered to the prefix cache
  };
  struct RowState {
    bool used = false;        // handed out
    int64_t covered = 0;      // tokens every group's blocks cover
    int64_t quiet_until = 0;  // below this many computed tokens, computed() has nothing to do
  };

  // `row`'s state; InternalError when the row is not handed out.
  RowState& row_state(int32_t row) {
    PAGODA_CHECK(row >= 0 && row < static_cast<int32_t>(rows_.size()) && rows_[row].used,
                 "row {} is not a request's", row);
    return rows_[row];
  }
  const RowState& row_state(int32_t row) const {
    return const_cast<KvCacheManager*>(this)->row_state(row);
  }
  // `row`'s state in every group; InternalError when the row is not handed out.
  GroupState* groups_of(int32_t row) {
    row_state(row);
    return group_states_.data() + static_cast<size_t>(row) * plan_.groups.size();
  }
  const GroupState* groups_of(int32_t row) const {
    return const_cast<KvCacheManager*>(this)->groups_of(row);
  }
  // Hashes `row`'s new full blocks and starts loading where the prefix cache will record them.
  void hash_new_blocks(int32_t row, std::span<const int32_t> tokens, int64_t num_computed,
                       std::span<const uint64_t> extra_keys);
  // Offers `row`'s hashed blocks to the prefix cache.
  void record_hashed_blocks(int32_t row);
  // The computed length at which `row` next fills a block to hash (when `cache_full_blocks`) or
  // frees one out of a window.
  int64_t next_change(int32_t row, bool cache_full_blocks) const;
  // Widens group `group`'s rows to hold at least `blocks` entries, keeping every row's.
  void reserve_blocks(size_t group, int64_t blocks);
  int32_t* table(int64_t group, int32_t row) {
    return tables_[group].data() + row * strides_[group];
  }

  const KvCachePlan& plan_;
  BlockPool pool_;
  std::vector<int64_t> strides_;              // per group: entries of a row
  std::vector<std::vector<int32_t>> tables_;  // per group: rows × stride
  std::vector<RowState> rows_;
  std::vector<GroupState> group_states_;  // rows × groups
  std::vector<int32_t> free_rows_;
  std::vector<int32_t> scratch_;  // blocks being freed, reused across calls
};

}  // namespace pagoda
