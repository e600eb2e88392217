// The KV block pool: block ids are indices with reference counts, a free queue and a prefix cache.
// Block 0 is the null block: never handed out, it stands for "no block" in block tables.
//
// Free queue order: a freed block that holds no cached prefix goes to the front and is reused
// first; a freed cached block goes to the back, so cached blocks are evicted last and in the order
// they were freed (least recently used first). Allocating a cached free block evicts its entry.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kv/block_hash.h"
#include "kv/prefix_table.h"

namespace pagoda {

// Blocks no request is handed out: block 0, the null block.
constexpr int64_t kNullBlocks = 1;

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free() const { return num_free_; }
  int64_t num_cached() const { return cache_.size(); }
  bool can_allocate(int64_t count) const { return count <= num_free(); }

  // Fills `out` with blocks from the front of the free queue, each with one reference; cached ones
  // lose their cache entry. Requires can_allocate(out.size()).
  void allocate(std::span<int32_t> out);
  // Drops one reference of each block, in the given order; a block whose count reaches zero joins
  // the free queue (front when uncached, back when cached). Free a request's blocks last-first so
  // its tail is evicted before its shared head.
  void free(std::span<const int32_t> blocks);
  int32_t ref_count(int32_t block) const;

  // The block caching `hash` in KV group `group`, if any (referenced or free).
  std::optional<int32_t> cached_block(BlockHash hash, int64_t group) const;
  // Adds a reference to each block (prefix-cache hits); a free one leaves the free queue.
  void take(std::span<const int32_t> blocks);
  // Starts loading what cache(_, hash, group) will touch.
  void prefetch_cache(BlockHash hash, int64_t group) const { cache_.prefetch(hash, group); }
  // Records that `block`, now full, holds the prefix `hash` of group `group`. A block already
  // caching something, or a hash already cached by another block, is left as it is.
  void cache(int32_t block, BlockHash hash, int64_t group);

 private:
  struct Key {
    BlockHash hash;
    int64_t group;
  };
  struct Block {
    int32_t ref_count = 0;
    // Neighbours in the free queue while free (-1 at either end): an intrusive list, so queue
    // operations never allocate.
    int32_t prev = -1;
    int32_t next = -1;
    bool free = false;
    std::optional<Key> key;  // set while the block caches a prefix
  };

  void check_block(int32_t block) const;
  void push_free(int32_t block, bool at_back);
  void unlink_free(int32_t block);

  std::vector<Block> blocks_;
  int32_t head_ = -1;  // the free queue's front
  int32_t tail_ = -1;
  int64_t num_free_ = 0;
  PrefixTable cache_;
};

}  // namespace pagoda
