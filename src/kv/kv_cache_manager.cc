#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace pagoda {

KvCacheManager::KvCacheManager(const KvCachePlan& plan)
    : plan_(plan), pool_(plan.num_blocks), tables_(plan.groups.size()) {
  for (const KvGroup& group : plan.groups) {
    const int64_t block_size = group.spec.page.block_size;
    strides_.push_back((plan.max_model_len + block_size - 1) / block_size);
  }
}

const KvCacheManager::Held& KvCacheManager::held(int64_t id) const {
  const auto it = held_.find(id);
  PAGODA_CHECK(it != held_.end(), "request {} holds no blocks", id);
  return it->second;
}

KvCacheManager::Held& KvCacheManager::hold(int64_t id) {
  const auto [it, added] = held_.try_emplace(id);
  if (!added) return it->second;
  if (free_rows_.empty()) {
    // Double the rows of every table; the new ones are free, lowest first.
    const int32_t grown = std::max(4, num_rows_ * 2);
    for (size_t g = 0; g < tables_.size(); ++g)
      tables_[g].resize(static_cast<size_t>(grown) * strides_[g], 0);
    for (int32_t r = grown - 1; r >= num_rows_; --r)
      free_rows_.push_back(r);
    num_rows_ = grown;
  }
  it->second.row = free_rows_.back();
  free_rows_.pop_back();
  it->second.groups.resize(plan_.groups.size());
  return it->second;
}

int64_t KvCacheManager::blocks_needed(int64_t id, int64_t num_tokens) const {
  const auto it = held_.find(id);
  int64_t needed = 0;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    const int64_t have = it == held_.end() ? 0 : it->second.groups[g].num_blocks;
    needed += std::max<int64_t>(0, (num_tokens + block_size - 1) / block_size - have);
  }
  return needed;
}

bool KvCacheManager::can_allocate(const PrefixHit& hit, int64_t num_tokens) const {
  int64_t needed = 0;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    // A hit of no tokens may have no entries at all.
    const std::span<const int32_t> blocks = g < hit.blocks.size()
                                                ? std::span<const int32_t>(hit.blocks[g])
                                                : std::span<const int32_t>();
    needed += std::max<int64_t>(
        0, (num_tokens + block_size - 1) / block_size - static_cast<int64_t>(blocks.size()));
    for (int32_t block : blocks) {
      if (block != 0 && pool_.ref_count(block) == 0) ++needed;  // it leaves the free queue
    }
  }
  return pool_.can_allocate(needed);
}

void KvCacheManager::allocate_slots(int64_t id, int64_t num_tokens) {
  PAGODA_CHECK(num_tokens <= plan_.max_model_len, "request {} wants slots for {} tokens, past {}",
               id, num_tokens, plan_.max_model_len);
  PAGODA_CHECK(can_allocate(id, num_tokens), "request {} allocates {} tokens' blocks unchecked", id,
               num_tokens);
  Held& entry = hold(id);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    const int64_t wanted = (num_tokens + block_size - 1) / block_size;
    GroupState& state = entry.groups[g];
    if (wanted <= state.num_blocks) continue;
    pool_.allocate(std::span(row(g, entry.row) + state.num_blocks, wanted - state.num_blocks));
    state.num_blocks = wanted;
  }
}

void KvCacheManager::free(int64_t id) {
  const auto it = held_.find(id);
  if (it == held_.end()) return;
  Held& entry = it->second;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    int32_t* blocks = row(g, entry.row);
    // Last block first, so a request's tail is evicted before the prefix others may share.
    scratch_.clear();
    for (int64_t b = entry.groups[g].num_blocks - 1; b >= 0; --b) {
      if (blocks[b] != 0) scratch_.push_back(blocks[b]);  // the null block stands for a freed slot
      blocks[b] = 0;
    }
    pool_.free(scratch_);
  }
  free_rows_.push_back(entry.row);
  held_.erase(it);
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
  PAGODA_CHECK(held_.count(id) == 0, "request {} already holds blocks", id);
  Held& entry = hold(id);
  for (size_t g = 0; g < hit.blocks.size(); ++g) {
    const std::vector<int32_t>& blocks = hit.blocks[g];
    GroupState& state = entry.groups[g];
    // A sliding group's hit starts with null blocks, out of its window.
    while (state.num_freed < static_cast<int64_t>(blocks.size()) && blocks[state.num_freed] == 0)
      ++state.num_freed;
    pool_.take(std::span(blocks).subspan(state.num_freed));
    std::copy(blocks.begin(), blocks.end(), row(g, entry.row));
    state.num_blocks = static_cast<int64_t>(blocks.size());
  }
}

void KvCacheManager::cache_full_blocks(int64_t id, std::span<const int32_t> tokens,
                                       int64_t num_computed, std::span<const uint64_t> extra_keys) {
  Held& entry = held_.at(id);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    GroupState& state = entry.groups[g];
    std::vector<BlockHash>& chain = state.hashes;
    const int64_t full = std::min(num_computed / block_size, state.num_blocks);
    const int32_t* blocks = row(g, entry.row);
    for (int64_t b = static_cast<int64_t>(chain.size()); b < full; ++b) {
      const BlockHash parent = b == 0 ? kRootBlockHash : chain[b - 1];
      chain.push_back(hash_block(parent, tokens.subspan(b * block_size, block_size), extra_keys));
      if (blocks[b] != 0) pool_.cache(blocks[b], chain[b], static_cast<int64_t>(g));
    }
  }
}

void KvCacheManager::free_outside_window(int64_t id, int64_t num_computed) {
  Held& entry = held_.at(id);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const KvSpec& spec = plan_.groups[g].spec;
    if (spec.kind != AttentionKind::kSliding) continue;
    GroupState& state = entry.groups[g];
    // The next query, at position num_computed, sees tokens from num_computed - window + 1 on.
    const int64_t first_token = std::max<int64_t>(0, num_computed - spec.sliding_window + 1);
    const int64_t dead = std::min(first_token / spec.page.block_size, state.num_blocks);
    if (dead <= state.num_freed) continue;
    int32_t* blocks = row(g, entry.row);
    scratch_.clear();
    for (int64_t b = dead - 1; b >= state.num_freed; --b) {
      if (blocks[b] != 0) scratch_.push_back(blocks[b]);
      blocks[b] = 0;
    }
    pool_.free(scratch_);
    state.num_freed = dead;
  }
}

std::span<const int32_t> KvCacheManager::block_ids(int64_t id, int64_t group) const {
  const Held& entry = held(id);
  return std::span(tables_[group])
      .subspan(entry.row * strides_[group], entry.groups[group].num_blocks);
}

}  // namespace pagoda
