#include "kv/block_pool.h"

#include "core/error.h"
#include "kv/kv_cache_plan.h"

namespace pagoda {

BlockPool::BlockPool(int64_t num_blocks) : ref_counts_(num_blocks, 0) {
  PAGODA_CHECK(num_blocks > kNullBlocks, "a block pool needs more than the null block");
  for (int64_t b = kNullBlocks; b < num_blocks; ++b)
    free_queue_.push_back(static_cast<int32_t>(b));
}

std::vector<int32_t> BlockPool::allocate(int64_t count) {
  PAGODA_CHECK(can_allocate(count), "allocating {} blocks with {} free", count, num_free());
  std::vector<int32_t> blocks;
  blocks.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t block = free_queue_.front();
    free_queue_.pop_front();
    ref_counts_[block] = 1;
    blocks.push_back(block);
  }
  return blocks;
}

void BlockPool::free(const std::vector<int32_t>& blocks) {
  for (int32_t block : blocks) {
    PAGODA_CHECK(block >= kNullBlocks && block < num_blocks() && ref_counts_[block] > 0,
                 "freeing block {} with {} references", block,
                 block >= 0 && block < num_blocks() ? ref_counts_[block] : -1);
    if (--ref_counts_[block] == 0) free_queue_.push_back(block);
  }
}

}  // namespace pagoda
