#include "kv/kv_cache_manager.h"

#include "core/error.h"

namespace pagoda {

int64_t blocks_to_hold(const KvCachePlan& plan, int64_t num_tokens) {
  int64_t blocks = 0;
  for (const KvGroup& group : plan.groups) {
    blocks += (num_tokens + group.spec.page.block_size - 1) / group.spec.page.block_size;
  }
  return blocks;
}

KvCacheManager::KvCacheManager(const KvCachePlan& plan) : plan_(plan), pool_(plan.num_blocks) {}

int64_t KvCacheManager::blocks_needed(int64_t id, int64_t num_tokens) const {
  const auto it = tables_.find(id);
  int64_t needed = 0;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    const int64_t held = it == tables_.end() ? 0 : static_cast<int64_t>(it->second[g].size());
    needed += std::max<int64_t>(0, (num_tokens + block_size - 1) / block_size - held);
  }
  return needed;
}

bool KvCacheManager::allocate_slots(int64_t id, int64_t num_tokens) {
  if (!pool_.can_allocate(blocks_needed(id, num_tokens))) return false;
  auto& tables = tables_[id];
  tables.resize(plan_.groups.size());
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    const int64_t wanted = (num_tokens + block_size - 1) / block_size;
    const int64_t missing = wanted - static_cast<int64_t>(tables[g].size());
    if (missing <= 0) continue;
    const std::vector<int32_t> blocks = pool_.allocate(missing);
    tables[g].insert(tables[g].end(), blocks.begin(), blocks.end());
  }
  return true;
}

void KvCacheManager::free(int64_t id) {
  const auto it = tables_.find(id);
  if (it == tables_.end()) return;
  // Last block first, so a request's tail is evicted before the prefix others may share.
  for (const std::vector<int32_t>& blocks : it->second) {
    pool_.free(std::vector<int32_t>(blocks.rbegin(), blocks.rend()));
  }
  tables_.erase(it);
}

const std::vector<std::vector<int32_t>>& KvCacheManager::block_ids(int64_t id) const {
  const auto it = tables_.find(id);
  PAGODA_CHECK(it != tables_.end(), "request {} holds no blocks", id);
  return it->second;
}

}  // namespace pagoda
