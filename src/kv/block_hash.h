// Prefix-cache keys: a full block's hash chains its parent's hash, its token ids and extra keys
// (a salt, for example), so equal hashes mean equal whole prefixes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

using BlockHash = uint64_t;

constexpr BlockHash kRootBlockHash = 0x70616730646121ull;  // the parent of every first block

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens,
                     std::span<const uint64_t> extra_keys);

// The chained hashes of every full block of `tokens` (a partial last block gets none).
std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int64_t block_size,
                                        std::span<const uint64_t> extra_keys);

}  // namespace pagoda
