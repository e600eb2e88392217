#include "kv/block_hash.h"

#include <xxhash.h>

#include "core/error.h"

namespace pagoda {

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens,
                     std::span<const uint64_t> extra_keys) {
  XXH3_state_t* state = XXH3_createState();
  PAGODA_CHECK(state != nullptr, "xxhash state");
  XXH3_64bits_reset_withSeed(state, parent);
  const uint64_t counts[2] = {tokens.size(), extra_keys.size()};
  XXH3_64bits_update(state, counts, sizeof(counts));
  XXH3_64bits_update(state, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(state, extra_keys.data(), extra_keys.size_bytes());
  const BlockHash hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return hash;
}

std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int64_t block_size,
                                        std::span<const uint64_t> extra_keys) {
  PAGODA_CHECK(block_size > 0, "block size {}", block_size);
  std::vector<BlockHash> hashes;
  BlockHash parent = kRootBlockHash;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    parent = hash_block(parent, tokens.subspan(start, block_size), extra_keys);
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace pagoda
