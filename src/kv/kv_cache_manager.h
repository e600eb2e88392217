// Per-request block tables over one block pool: a request holds, in every KV cache group, the
// blocks that cover its tokens.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

// Blocks a manager takes, over all groups, for a new request of `num_tokens` tokens. Every group
// keeps every block of a request for now (sliding groups included).
int64_t blocks_to_hold(const KvCachePlan& plan, int64_t num_tokens);

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCachePlan& plan);

  // Extends request `id`'s blocks in every group to cover `num_tokens` tokens. Returns false and
  // allocates nothing when the pool has too few free blocks.
  bool allocate_slots(int64_t id, int64_t num_tokens);
  // Blocks a request would need in total, over all groups, to hold `num_tokens` tokens.
  int64_t blocks_needed(int64_t id, int64_t num_tokens) const;
  // Returns every block of request `id` to the pool.
  void free(int64_t id);
  // Block ids of request `id`, per group, in token order.
  const std::vector<std::vector<int32_t>>& block_ids(int64_t id) const;
  int64_t num_free_blocks() const { return pool_.num_free(); }

 private:
  const KvCachePlan& plan_;
  BlockPool pool_;
  std::map<int64_t, std::vector<std::vector<int32_t>>> tables_;
};

}  // namespace pagoda
