#include "kv/block_pool.h"

#include "core/error.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

BlockPool::BlockPool(int64_t num_blocks) : blocks_(num_blocks), cache_(num_blocks) {
  PAGODA_CHECK(num_blocks > kNullBlocks, "a block pool needs more than the null block");
  for (int64_t b = kNullBlocks; b < num_blocks; ++b)
    push_free(static_cast<int32_t>(b), /*at_back=*/true);
}

void BlockPool::push_free(int32_t id, bool at_back) {
  Block& block = blocks_[id];
  block.free = true;
  if (at_back) {
    block.prev = tail_;
    block.next = -1;
    (tail_ >= 0 ? blocks_[tail_].next : head_) = id;
    tail_ = id;
  } else {
    block.prev = -1;
    block.next = head_;
    (head_ >= 0 ? blocks_[head_].prev : tail_) = id;
    head_ = id;
  }
  ++num_free_;
}

void BlockPool::unlink_free(int32_t id) {
  Block& block = blocks_[id];
  (block.prev >= 0 ? blocks_[block.prev].next : head_) = block.next;
  (block.next >= 0 ? blocks_[block.next].prev : tail_) = block.prev;
  block.prev = block.next = -1;
  block.free = false;
  --num_free_;
}

void BlockPool::check_block(int32_t block) const {
  PAGODA_CHECK(block >= kNullBlocks && block < num_blocks(), "block {} is not a pool block", block);
}

int32_t BlockPool::ref_count(int32_t block) const {
  check_block(block);
  return blocks_[block].ref_count;
}

void BlockPool::allocate(std::span<int32_t> out) {
  PAGODA_CHECK(can_allocate(static_cast<int64_t>(out.size())), "allocating {} blocks with {} free",
               out.size(), num_free());
  for (int32_t& taken : out) {
    const int32_t id = head_;
    unlink_free(id);
    Block& block = blocks_[id];
    block.ref_count = 1;
    if (block.key) {
      cache_.erase(block.key->hash, block.key->group);
      block.key.reset();
    }
    taken = id;
  }
}

void BlockPool::free(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    check_block(id);
    Block& block = blocks_[id];
    PAGODA_CHECK(block.ref_count > 0, "freeing block {} with no references", id);
    if (--block.ref_count > 0) continue;
    push_free(id, /*at_back=*/block.key.has_value());
  }
}

std::optional<int32_t> BlockPool::cached_block(BlockHash hash, int64_t group) const {
  return cache_.find(hash, group);
}

void BlockPool::take(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    check_block(id);
    Block& block = blocks_[id];
    if (block.free) unlink_free(id);
    ++block.ref_count;
  }
}

void BlockPool::cache(int32_t id, BlockHash hash, int64_t group) {
  check_block(id);
  Block& block = blocks_[id];
  if (block.key) return;
  if (cache_.insert(hash, group, id)) block.key = Key{hash, group};
}

}  // namespace pagoda
