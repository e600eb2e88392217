#include "kv/kv_cache_manager.h"

#include <numeric>

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
    std::vector<int32_t> held;
    for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
      if (*block != 0) held.push_back(*block);  // the null block stands for a freed slot
    }
    pool_.free(held);
  }
  tables_.erase(it);
  hashes_.erase(id);
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens,
                                             std::span<const uint64_t> extra_keys) const {
  const int64_t num_groups = static_cast<int64_t>(plan_.groups.size());
  // Hashes per group (block sizes differ between groups).
  std::vector<std::vector<BlockHash>> hashes(num_groups);
  int64_t step = 1;  // hits are multiples of every group's block size
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    hashes[g] = hash_full_blocks(tokens, block_size, extra_keys);
    step = std::lcm(step, block_size);
  }
  const int64_t limit = static_cast<int64_t>(tokens.size()) - 1;
  int64_t length = limit / step * step;
  PrefixHit hit;
  hit.blocks.assign(num_groups, {});
  // Shrink the candidate until every group holds it; a sliding group's answer depends on where the
  // hit ends, so repeat until nothing changes.
  bool changed = true;
  while (changed && length > 0) {
    changed = false;
    for (int64_t g = 0; g < num_groups && length > 0; ++g) {
      const KvSpec& spec = plan_.groups[g].spec;
      const int64_t block_size = spec.page.block_size;
      const int64_t blocks = length / block_size;
      int64_t held = 0;
      if (spec.kind == AttentionKind::kFull) {
        while (held < blocks && pool_.cached_block(hashes[g][held], g))
          ++held;
      } else {
        // The last `needed` blocks before the end must be cached, contiguous.
        const int64_t needed =
            std::min(blocks, (spec.sliding_window - 1 + block_size - 1) / block_size);
        int64_t end = blocks;
        while (end > 0) {
          int64_t run = 0;
          while (run < needed && pool_.cached_block(hashes[g][end - 1 - run], g))
            ++run;
          if (run >= needed) break;
          end -= run + 1;
        }
        held = std::max<int64_t>(end, 0);
      }
      const int64_t reachable = held * block_size / step * step;
      if (reachable < length) {
        length = reachable;
        changed = true;
      }
    }
  }
  hit.num_tokens = length;
  for (int64_t g = 0; g < num_groups && length > 0; ++g) {
    const KvSpec& spec = plan_.groups[g].spec;
    const int64_t block_size = spec.page.block_size;
    const int64_t blocks = length / block_size;
    const int64_t first_needed =
        spec.kind == AttentionKind::kFull
            ? 0
            : std::max<int64_t>(0,
                                blocks - (spec.sliding_window - 1 + block_size - 1) / block_size);
    for (int64_t b = 0; b < blocks; ++b) {
      hit.blocks[g].push_back(b < first_needed ? 0 : *pool_.cached_block(hashes[g][b], g));
    }
  }
  return hit;
}

void KvCacheManager::adopt_prefix(int64_t id, const PrefixHit& hit) {
  PAGODA_CHECK(tables_.count(id) == 0, "request {} already holds blocks", id);
  auto& tables = tables_[id];
  tables.resize(plan_.groups.size());
  for (size_t g = 0; g < hit.blocks.size(); ++g) {
    std::vector<int32_t> real;
    for (int32_t block : hit.blocks[g]) {
      if (block != 0) real.push_back(block);
    }
    pool_.take(real);
    tables[g] = hit.blocks[g];
  }
}

void KvCacheManager::cache_full_blocks(int64_t id, std::span<const int32_t> tokens,
                                       int64_t num_computed, std::span<const uint64_t> extra_keys) {
  auto& tables = tables_.at(id);
  auto& hashes = hashes_[id];
  hashes.resize(plan_.groups.size());
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    std::vector<BlockHash>& chain = hashes[g];
    const int64_t full = std::min<int64_t>(num_computed / block_size, tables[g].size());
    for (int64_t b = static_cast<int64_t>(chain.size()); b < full; ++b) {
      const BlockHash parent = b == 0 ? kRootBlockHash : chain[b - 1];
      chain.push_back(hash_block(parent, tokens.subspan(b * block_size, block_size), extra_keys));
      if (tables[g][b] != 0) pool_.cache(tables[g][b], chain[b], static_cast<int64_t>(g));
    }
  }
}

void KvCacheManager::free_outside_window(int64_t id, int64_t num_computed) {
  auto& tables = tables_.at(id);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const KvSpec& spec = plan_.groups[g].spec;
    if (spec.kind != AttentionKind::kSliding) continue;
    // The next query, at position num_computed, sees tokens from num_computed - window + 1 on.
    const int64_t first_token = std::max<int64_t>(0, num_computed - spec.sliding_window + 1);
    const int64_t dead_blocks = first_token / spec.page.block_size;
    std::vector<int32_t> freed;
    for (int64_t b = std::min<int64_t>(dead_blocks, tables[g].size()) - 1; b >= 0; --b) {
      if (tables[g][b] == 0) break;  // everything before was freed already
      freed.push_back(tables[g][b]);
      tables[g][b] = 0;
    }
    pool_.free(freed);
  }
}

const std::vector<std::vector<int32_t>>& KvCacheManager::block_ids(int64_t id) const {
  const auto it = tables_.find(id);
  PAGODA_CHECK(it != tables_.end(), "request {} holds no blocks", id);
  return it->second;
}

}  // namespace pagoda
