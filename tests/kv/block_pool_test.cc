#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace pagoda {
namespace {

std::vector<int32_t> allocate(BlockPool& pool, int64_t count) {
  std::vector<int32_t> blocks(count);
  pool.allocate(blocks);
  return blocks;
}

using Ids = std::vector<int32_t>;

TEST(BlockPoolTest, AllocatesAndFrees) {
  BlockPool pool(5);
  EXPECT_EQ(pool.num_free(), 4);  // block 0 is the null block
  EXPECT_EQ(allocate(pool, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(pool.can_allocate(2));
  EXPECT_EQ(pool.ref_count(2), 1);
  pool.free(Ids{2});
  EXPECT_EQ(pool.ref_count(2), 0);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_THROW(pool.free(Ids{2}), InternalError);  // no references left
  EXPECT_THROW(pool.free(Ids{0}), InternalError);  // the null block is never handed out
  EXPECT_THROW(allocate(pool, 3), InternalError);
}

TEST(BlockPoolTest, UncachedBlocksAreReusedFirstAndCachedOnesLast) {
  BlockPool pool(7);
  const std::vector<int32_t> blocks = allocate(pool, 6);  // 1..6
  pool.cache(1, 101, 0);
  pool.cache(2, 102, 0);
  pool.free(Ids{2, 1});  // cached: to the back, 2 then 1 (least recently used first)
  pool.free(Ids{3});     // uncached: to the front
  pool.free(Ids{4});     // uncached: to the front, before 3
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(allocate(pool, 2), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(pool.cached_block(102, 0), std::optional<int32_t>(2));
  EXPECT_EQ(allocate(pool, 1), (std::vector<int32_t>{2}));  // evicts the oldest cached block
  EXPECT_EQ(pool.cached_block(102, 0), std::nullopt);
  EXPECT_EQ(pool.cached_block(101, 0), std::optional<int32_t>(1));
  EXPECT_EQ(pool.num_cached(), 1);
}

TEST(BlockPoolTest, HitsReviveFreeCachedBlocks) {
  BlockPool pool(4);
  const std::vector<int32_t> blocks = allocate(pool, 2);
  pool.cache(blocks[0], 55, 1);
  EXPECT_EQ(pool.cached_block(55, 0), std::nullopt);  // groups are separate
  pool.take(Ids{blocks[0]});                          // a second request shares it
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  pool.free(Ids{blocks[1], blocks[0]});
  pool.free(Ids{blocks[0]});
  EXPECT_EQ(pool.num_free(), 3);
  pool.take(Ids{*pool.cached_block(55, 1)});  // a hit on a free cached block
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.ref_count(blocks[0]), 1);
  // Re-caching the same hash elsewhere is ignored; the first block keeps it.
  pool.cache(blocks[1], 55, 1);
  EXPECT_EQ(pool.cached_block(55, 1), std::optional<int32_t>(blocks[0]));
}

TEST(BlockPoolTest, QueueStaysOrderedThroughHitsInTheMiddle) {
  BlockPool pool(8);
  const std::vector<int32_t> blocks = allocate(pool, 7);  // 1..7
  for (int32_t b : {5, 6, 7})
    pool.cache(b, 500 + b, 0);
  pool.free(Ids{5, 6, 7});  // cached, to the back: 5 6 7
  pool.free(Ids{1, 2});     // uncached, to the front: 2 1 5 6 7
  pool.take(Ids{6});        // a hit out of the middle: 2 1 5 7
  pool.take(Ids{2});        // and off the front: 1 5 7
  pool.free(Ids{3});        // 3 1 5 7
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(allocate(pool, 4), (std::vector<int32_t>{3, 1, 5, 7}));
  EXPECT_EQ(pool.num_cached(), 1);  // 6 is referenced, so it kept its entry
  EXPECT_EQ(pool.cached_block(506, 0), std::optional<int32_t>(6));
  pool.free(Ids{6, 2});  // 2 then 6 at the back
  EXPECT_EQ(allocate(pool, 2), (std::vector<int32_t>{2, 6}));
}

TEST(BlockHashTest, ChainsWholePrefixes) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int32_t> b = a;
  b[0] = 99;
  const std::vector<BlockHash> ha = hash_full_blocks(a, 4, {});
  const std::vector<BlockHash> hb = hash_full_blocks(b, 4, {});
  ASSERT_EQ(ha.size(), 2u);  // the partial third block has no hash
  EXPECT_EQ(ha, hash_full_blocks(a, 4, {}));
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);  // the second block's tokens agree but its prefix does not
  const std::vector<uint64_t> salt = {42};
  EXPECT_NE(hash_full_blocks(a, 4, salt)[0], ha[0]);
  EXPECT_EQ(hash_block(kRootBlockHash, std::span(a).subspan(0, 4), {}), ha[0]);
}

}  // namespace
}  // namespace pagoda
