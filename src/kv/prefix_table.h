// The prefix cache's index: (block hash, KV group) -> the block caching that prefix. Open
// addressing with linear probing in a power-of-two table kept at most half full, so a lookup or an
// insert touches a cache line or two and never allocates: a decode step caches a block for every
// request that fills one, and a node-based map spent most of such a step's host time on them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kv/block_hash.h"

namespace pagoda {

class PrefixTable {
 public:
  // Room for `max_entries` entries (a pool's block count: a block caches one prefix at a time).
  explicit PrefixTable(int64_t max_entries);

  std::optional<int32_t> find(BlockHash hash, int64_t group) const;
  // Starts loading the key's first slot, so an insert soon after finds it in the cache.
  void prefetch(BlockHash hash, int64_t group) const {
    __builtin_prefetch(&slots_[home(hash, group)]);
  }
  // Adds the entry unless its key is present; returns whether it did. InternalError when the
  // table already holds max_entries.
  bool insert(BlockHash hash, int64_t group, int32_t block);
  // Removes the key's entry; InternalError when there is none.
  void erase(BlockHash hash, int64_t group);
  int64_t size() const { return size_; }

 private:
  struct Slot {
    BlockHash hash = 0;
    int32_t group = 0;
    int32_t block = -1;  // -1: empty
  };

  size_t home(BlockHash hash, int64_t group) const;
  // The slot holding the key, or the empty slot where its probe ends.
  size_t probe(BlockHash hash, int64_t group) const;

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int64_t max_entries_ = 0;
  int64_t size_ = 0;
};

}  // namespace pagoda
