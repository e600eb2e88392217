// The KV block pool: block ids are indices with reference counts and a free queue. Block 0 is the
// null block: never handed out, it stands for "no block" in block tables.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace pagoda {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_queue_.size()); }
  bool can_allocate(int64_t count) const { return count <= num_free(); }

  // Takes `count` free blocks (oldest freed first), each with one reference. Requires
  // can_allocate(count).
  std::vector<int32_t> allocate(int64_t count);
  // Drops one reference of each block; a block whose count reaches zero becomes free.
  void free(const std::vector<int32_t>& blocks);
  int32_t ref_count(int32_t block) const { return ref_counts_.at(block); }

 private:
  std::vector<int32_t> ref_counts_;
  std::deque<int32_t> free_queue_;
};

}  // namespace pagoda
