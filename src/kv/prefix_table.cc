#include "kv/prefix_table.h"

#include <bit>

#include "core/error.h"

namespace pagoda {

PrefixTable::PrefixTable(int64_t max_entries) : max_entries_(max_entries) {
  PAGODA_CHECK(max_entries >= 0, "a prefix table for {} entries", max_entries);
  const size_t capacity = std::bit_ceil(static_cast<size_t>(std::max<int64_t>(8, 2 * max_entries)));
  slots_.resize(capacity);
  mask_ = capacity - 1;
}

size_t PrefixTable::home(BlockHash hash, int64_t group) const {
  // Block hashes are already uniform; the group moves equal hashes of different groups apart.
  return (hash + static_cast<uint64_t>(group) * 0x9e3779b97f4a7c15ull) & mask_;
}

size_t PrefixTable::probe(BlockHash hash, int64_t group) const {
  size_t i = home(hash, group);
  while (slots_[i].block >= 0 && (slots_[i].hash != hash || slots_[i].group != group))
    i = (i + 1) & mask_;
  return i;
}

std::optional<int32_t> PrefixTable::find(BlockHash hash, int64_t group) const {
  const Slot& slot = slots_[probe(hash, group)];
  if (slot.block < 0) return std::nullopt;
  return slot.block;
}

bool PrefixTable::insert(BlockHash hash, int64_t group, int32_t block) {
  PAGODA_CHECK(block >= 0, "caching block {}", block);
  Slot& slot = slots_[probe(hash, group)];
  if (slot.block >= 0) return false;
  PAGODA_CHECK(size_ < max_entries_, "a prefix table of {} entries is full", max_entries_);
  slot = {hash, static_cast<int32_t>(group), block};
  ++size_;
  return true;
}

void PrefixTable::erase(BlockHash hash, int64_t group) {
  size_t hole = probe(hash, group);
  PAGODA_CHECK(slots_[hole].block >= 0, "erasing a prefix the table does not hold");
  // Backward shift: later entries of the run move into the hole unless their home lies
  // cyclically after the hole, so every probe still reaches its key before an empty slot.
  for (size_t next = (hole + 1) & mask_; slots_[next].block >= 0; next = (next + 1) & mask_) {
    const size_t want = home(slots_[next].hash, slots_[next].group);
    const bool stays = hole <= next ? (hole < want && want <= next) : (hole < want || want <= next);
    if (stays) continue;
    slots_[hole] = slots_[next];
    hole = next;
  }
  slots_[hole].block = -1;
  --size_;
}

}  // namespace pagoda
