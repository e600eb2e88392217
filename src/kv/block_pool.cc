#include "kv/block_pool.h"

#include "core/error.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

BlockPool::BlockPool(int64_t num_blocks) : blocks_(num_blocks) {
  PAGODA_CHECK(num_blocks > kNullBlocks, "a block pool needs more than the null block");
  for (int64_t b = kNullBlocks; b < num_blocks; ++b) {
    blocks_[b].free = true;
    blocks_[b].free_position = free_queue_.insert(free_queue_.end(), static_cast<int32_t>(b));
  }
}

void BlockPool::check_block(int32_t block) const {
  PAGODA_CHECK(block >= kNullBlocks && block < num_blocks(), "block {} is not a pool block", block);
}

int32_t BlockPool::ref_count(int32_t block) const {
  check_block(block);
  return blocks_[block].ref_count;
}

std::vector<int32_t> BlockPool::allocate(int64_t count) {
  PAGODA_CHECK(can_allocate(count), "allocating {} blocks with {} free", count, num_free());
  std::vector<int32_t> taken;
  taken.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = free_queue_.front();
    free_queue_.pop_front();
    Block& block = blocks_[id];
    block.free = false;
    block.ref_count = 1;
    if (block.key) {
      cache_.erase(*block.key);
      block.key.reset();
    }
    taken.push_back(id);
  }
  return taken;
}

void BlockPool::free(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    check_block(id);
    Block& block = blocks_[id];
    PAGODA_CHECK(block.ref_count > 0, "freeing block {} with no references", id);
    if (--block.ref_count > 0) continue;
    block.free = true;
    block.free_position = block.key ? free_queue_.insert(free_queue_.end(), id)
                                    : free_queue_.insert(free_queue_.begin(), id);
  }
}

std::optional<int32_t> BlockPool::cached_block(BlockHash hash, int64_t group) const {
  const auto it = cache_.find(Key{hash, group});
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::take(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    check_block(id);
    Block& block = blocks_[id];
    if (block.free) {
      free_queue_.erase(block.free_position);
      block.free = false;
    }
    ++block.ref_count;
  }
}

void BlockPool::cache(int32_t id, BlockHash hash, int64_t group) {
  check_block(id);
  Block& block = blocks_[id];
  const Key key{hash, group};
  if (block.key || cache_.count(key) != 0) return;
  block.key = key;
  cache_.emplace(key, id);
}

}  // namespace pagoda
