#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace pagoda {

KvCacheManager::KvCacheManager(const KvCachePlan& plan)
    : plan_(plan), pool_(plan.num_blocks), tables_(plan.groups.size()) {
  for (const KvGroup& group : plan.groups) {
    const int64_t block_size = group.spec.block_tokens();
    strides_.push_back(
        std::min((plan.max_model_len + block_size - 1) / block_size, kMaxInitialTableBlocks));
  }
}

void KvCacheManager::reserve_blocks(size_t group, int64_t blocks) {
  const int64_t stride = strides_[group];
  if (blocks <= stride) return;
  const int64_t block_size = plan_.groups[group].spec.block_tokens();
  const int64_t most = (plan_.max_model_len + block_size - 1) / block_size;
  PAGODA_CHECK(blocks <= most, "a table row of {} blocks; max_model_len takes {}", blocks, most);
  const int64_t wider = std::min(most, std::max(blocks, 2 * stride));
  std::vector<int32_t> grown(rows_.size() * static_cast<size_t>(wider), 0);
  for (size_t r = 0; r < rows_.size(); ++r) {
    std::copy_n(tables_[group].data() + r * stride, stride, grown.data() + r * wider);
  }
  tables_[group] = std::move(grown);
  strides_[group] = wider;
}

int32_t KvCacheManager::add_request() {
  if (free_rows_.empty()) {
    // Double the rows of every table; the new ones are free, lowest first.
    const int32_t count = static_cast<int32_t>(rows_.size());
    const int32_t grown = std::max(4, count * 2);
    for (size_t g = 0; g < tables_.size(); ++g)
      tables_[g].resize(static_cast<size_t>(grown) * strides_[g], 0);
    rows_.resize(grown);
    group_states_.resize(static_cast<size_t>(grown) * plan_.groups.size());
    for (int32_t r = grown - 1; r >= count; --r)
      free_rows_.push_back(r);
  }
  const int32_t row = free_rows_.back();
  free_rows_.pop_back();
  rows_[row] = {.used = true};
  GroupState* groups = groups_of(row);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    groups[g].num_blocks = groups[g].num_freed = groups[g].num_recorded = 0;
    groups[g].hashes.clear();
  }
  return row;
}

int64_t KvCacheManager::blocks_needed(int32_t row, int64_t num_tokens) const {
  if (num_tokens <= row_state(row).covered) return 0;
  const GroupState* groups = groups_of(row);
  int64_t needed = 0;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.block_tokens();
    if (num_tokens <= groups[g].num_blocks * block_size) continue;
    needed += (num_tokens + block_size - 1) / block_size - groups[g].num_blocks;
  }
  return needed;
}

bool KvCacheManager::can_allocate(const PrefixHit& hit, int64_t num_tokens) const {
  int64_t needed = 0;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.block_tokens();
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

void KvCacheManager::allocate_slots(int32_t row, int64_t num_tokens) {
  PAGODA_CHECK(num_tokens <= plan_.max_model_len, "row {} wants slots for {} tokens, past {}", row,
               num_tokens, plan_.max_model_len);
  PAGODA_CHECK(can_allocate(row, num_tokens), "row {} allocates {} tokens' blocks unchecked", row,
               num_tokens);
  RowState& state = row_state(row);
  if (num_tokens <= state.covered) return;
  GroupState* groups = groups_of(row);
  state.covered = std::numeric_limits<int64_t>::max();
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.block_tokens();
    GroupState& group = groups[g];
    if (num_tokens > group.num_blocks * block_size) {
      const int64_t wanted = (num_tokens + block_size - 1) / block_size;
      reserve_blocks(g, wanted);
      pool_.allocate(std::span(table(g, row) + group.num_blocks, wanted - group.num_blocks));
      group.num_blocks = wanted;
    }
    state.covered = std::min(state.covered, group.num_blocks * block_size);
  }
}

void KvCacheManager::free(int32_t row) {
  const GroupState* groups = groups_of(row);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    int32_t* blocks = table(g, row);
    // Last block first, so a request's tail is evicted before the prefix others may share.
    scratch_.clear();
    for (int64_t b = groups[g].num_blocks - 1; b >= 0; --b) {
      if (blocks[b] != 0) scratch_.push_back(blocks[b]);  // the null block stands for a freed slot
      blocks[b] = 0;
    }
    pool_.free(scratch_);
  }
  rows_[row].used = false;
  free_rows_.push_back(row);
}

PrefixHit KvCacheManager::find_cached_prefix(std::span<const int32_t> tokens,
                                             std::span<const uint64_t> extra_keys) const {
  const int64_t num_groups = static_cast<int64_t>(plan_.groups.size());
  // Hashes per group (block sizes differ between groups).
  std::vector<std::vector<BlockHash>> hashes(num_groups);
  int64_t step = 1;  // hits are multiples of every group's block size
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t block_size = plan_.groups[g].spec.block_tokens();
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
      const int64_t block_size = spec.block_tokens();
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
    const int64_t block_size = spec.block_tokens();
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

void KvCacheManager::adopt_prefix(int32_t row, const PrefixHit& hit) {
  GroupState* groups = groups_of(row);
  for (size_t g = 0; g < hit.blocks.size(); ++g) {
    const std::vector<int32_t>& blocks = hit.blocks[g];
    GroupState& group = groups[g];
    PAGODA_CHECK(group.num_blocks == 0, "row {} already holds blocks", row);
    // A sliding group's hit starts with null blocks, out of its window.
    while (group.num_freed < static_cast<int64_t>(blocks.size()) && blocks[group.num_freed] == 0)
      ++group.num_freed;
    pool_.take(std::span(blocks).subspan(group.num_freed));
    reserve_blocks(g, static_cast<int64_t>(blocks.size()));
    std::copy(blocks.begin(), blocks.end(), table(g, row));
    group.num_blocks = static_cast<int64_t>(blocks.size());
  }
  rows_[row].covered = hit.num_tokens;
}

void KvCacheManager::computed(std::span<const ComputedRow> rows, bool cache_full_blocks) {
  // Every row's new full blocks are hashed before any is recorded, so the prefix cache's loads
  // overlap.
  if (cache_full_blocks) {
    for (const ComputedRow& r : rows) {
      if (r.num_computed >= row_state(r.row).quiet_until)
        hash_new_blocks(r.row, r.tokens, r.num_computed, r.extra_keys);
    }
  }
  for (const ComputedRow& r : rows) {
    RowState& state = row_state(r.row);
    if (r.num_computed < state.quiet_until) continue;
    if (cache_full_blocks) record_hashed_blocks(r.row);
    free_outside_window(r.row, r.num_computed);
    state.quiet_until = next_change(r.row, cache_full_blocks);
  }
}

int64_t KvCacheManager::next_change(int32_t row, bool cache_full_blocks) const {
  const GroupState* groups = groups_of(row);
  int64_t next = std::numeric_limits<int64_t>::max();
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const KvSpec& spec = plan_.groups[g].spec;
    const int64_t block_size = spec.block_tokens();
    // The next block to hash fills at this length.
    if (cache_full_blocks)
      next = std::min(next, (static_cast<int64_t>(groups[g].hashes.size()) + 1) * block_size);
    // The next block to free leaves the window once the first visible token is past it.
    if (spec.kind == AttentionKind::kSliding)
      next = std::min(next, (groups[g].num_freed + 1) * block_size + spec.sliding_window - 1);
  }
  return next;
}

void KvCacheManager::hash_new_blocks(int32_t row, std::span<const int32_t> tokens,
                                     int64_t num_computed, std::span<const uint64_t> extra_keys) {
  GroupState* groups = groups_of(row);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.block_tokens();
    GroupState& group = groups[g];
    std::vector<BlockHash>& chain = group.hashes;
    const int64_t full = std::min(num_computed / block_size, group.num_blocks);
    for (int64_t b = static_cast<int64_t>(chain.size()); b < full; ++b) {
      const BlockHash parent = b == 0 ? kRootBlockHash : chain[b - 1];
      chain.push_back(hash_block(parent, tokens.subspan(b * block_size, block_size), extra_keys));
      pool_.prefetch_cache(chain.back(), static_cast<int64_t>(g));
    }
  }
}

void KvCacheManager::cache_full_blocks(int32_t row, std::span<const int32_t> tokens,
                                       int64_t num_computed, std::span<const uint64_t> extra_keys) {
  hash_new_blocks(row, tokens, num_computed, extra_keys);
  record_hashed_blocks(row);
}

void KvCacheManager::record_hashed_blocks(int32_t row) {
  GroupState* groups = groups_of(row);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    GroupState& group = groups[g];
    const int32_t* blocks = table(g, row);
    for (; group.num_recorded < static_cast<int64_t>(group.hashes.size()); ++group.num_recorded) {
      const int64_t b = group.num_recorded;
      if (blocks[b] != 0) pool_.cache(blocks[b], group.hashes[b], static_cast<int64_t>(g));
    }
  }
}

void KvCacheManager::free_outside_window(int32_t row, int64_t num_computed) {
  GroupState* groups = groups_of(row);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const KvSpec& spec = plan_.groups[g].spec;
    if (spec.kind != AttentionKind::kSliding) continue;
    GroupState& group = groups[g];
    // The next query, at position num_computed, sees tokens from num_computed - window + 1 on.
    const int64_t first_token = std::max<int64_t>(0, num_computed - spec.sliding_window + 1);
    const int64_t dead = std::min(first_token / spec.block_tokens(), group.num_blocks);
    if (dead <= group.num_freed) continue;
    int32_t* blocks = table(g, row);
    scratch_.clear();
    for (int64_t b = dead - 1; b >= group.num_freed; --b) {
      if (blocks[b] != 0) scratch_.push_back(blocks[b]);
      blocks[b] = 0;
    }
    pool_.free(scratch_);
    group.num_freed = dead;
  }
}

std::span<const int32_t> KvCacheManager::block_ids(int32_t row, int64_t group) const {
  return std::span(tables_[group]).subspan(row * strides_[group], groups_of(row)[group].num_blocks);
}

}  // namespace pagoda
