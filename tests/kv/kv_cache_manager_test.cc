#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "kv/kv_test_configs.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

std::vector<int32_t> tokens(int count, int32_t first = 10) {
  std::vector<int32_t> ids;
  for (int i = 0; i < count; ++i)
    ids.push_back(first + i);
  return ids;
}

KvCachePlan plan_for(const ModelConfig& model, int64_t num_blocks, int64_t max_model_len = 64) {
  std::vector<KvLayer> layers = build_kv_layers(
      model, nullptr, {.block_size = 4, .dtype = DType::kF32, .backend = &cpu_attention_backend()});
  return plan_kv_cache(std::move(layers),
                       {.num_blocks = num_blocks, .max_model_len = max_model_len});
}

TEST(KvCacheManagerTest, CoversTokensInEveryGroup) {
  // Full head 16 and sliding head 8: the sliding group's blocks hold twice the tokens.
  const ModelConfig model = model_of({full_layer(1, 16), sliding_layer(1, 8, 64)});
  const KvCachePlan plan = plan_kv_cache(kv_layers(model), {.num_blocks = 7, .max_model_len = 64});
  KvCacheManager manager(plan);
  const int32_t r7 = manager.add_request();
  const int32_t r8 = manager.add_request();
  manager.allocate_slots(r7, 17);
  EXPECT_EQ(manager.block_ids(r7, 0).size(), 2u);  // 17 tokens in blocks of 16
  EXPECT_EQ(manager.block_ids(r7, 1).size(), 1u);  // and of 32
  EXPECT_EQ(manager.num_free_blocks(), 6 - 3);
  EXPECT_EQ(manager.blocks_needed(r7, 40), 1 + 1);
  EXPECT_FALSE(manager.can_allocate(r8, 64));  // too many
  EXPECT_EQ(manager.num_free_blocks(), 3);
  manager.free(r7);
  EXPECT_EQ(manager.num_free_blocks(), 6);
}

TEST(KvCacheManagerTest, SharedPrefixReusesBlocks) {
  const KvCachePlan plan = plan_for(model_of({full_layer(1, 8)}), 20);
  KvCacheManager manager(plan);
  const int32_t r1 = manager.add_request();
  const int32_t r2 = manager.add_request();
  const std::vector<int32_t> a = tokens(10);
  manager.allocate_slots(r1, 10);
  manager.cache_full_blocks(r1, a, 10, {});
  // Same first 9 tokens, then different: two full blocks (8 tokens) hit.
  std::vector<int32_t> b = tokens(12);
  b[9] = 999;
  const PrefixHit hit = manager.find_cached_prefix(b, {});
  EXPECT_EQ(hit.num_tokens, 8);
  ASSERT_EQ(hit.blocks[0].size(), 2u);
  EXPECT_EQ(hit.blocks[0][0], manager.block_ids(r1, 0)[0]);
  const int64_t free_before = manager.num_free_blocks();
  manager.adopt_prefix(r2, hit);
  manager.allocate_slots(r2, 12);
  EXPECT_EQ(manager.num_free_blocks(), free_before - 1);  // only the third block is new
  // A hit never covers the last token: exactly A's first 8 tokens hit only 4.
  EXPECT_EQ(manager.find_cached_prefix(tokens(8), {}).num_tokens, 4);
  // A salt separates otherwise equal prompts.
  const std::vector<uint64_t> salt = {7};
  EXPECT_EQ(manager.find_cached_prefix(b, salt).num_tokens, 0);
  manager.free(r1);
  manager.free(r2);
  EXPECT_EQ(manager.num_free_blocks(), 19);  // every block back; no leak
  // Still cached after both requests ended.
  EXPECT_EQ(manager.find_cached_prefix(b, {}).num_tokens, 8);
}

TEST(KvCacheManagerTest, AHitsFreeBlocksCountAgainstThePool) {
  // 5 usable blocks of 4 tokens. A finished request leaves 2 cached blocks in the free queue.
  const KvCachePlan plan = plan_for(model_of({full_layer(1, 8)}), 6, /*max_model_len=*/20);
  KvCacheManager manager(plan);
  const int32_t r1 = manager.add_request();
  const int32_t r7 = manager.add_request();
  manager.allocate_slots(r1, 9);
  manager.cache_full_blocks(r1, tokens(9), 9, {});
  manager.free(r1);
  const PrefixHit hit = manager.find_cached_prefix(tokens(20), {});
  ASSERT_EQ(hit.num_tokens, 8);
  // Starting on the hit takes its 2 free blocks out of the queue, so 3 more fit, not 5.
  EXPECT_TRUE(manager.can_allocate(hit, 20));
  manager.allocate_slots(r7, 4);  // another request takes a block
  EXPECT_FALSE(manager.can_allocate(hit, 20));
  EXPECT_TRUE(manager.can_allocate(hit, 16));
  EXPECT_TRUE(manager.can_allocate(PrefixHit{}, 16));  // no hit: 4 new blocks
  EXPECT_FALSE(manager.can_allocate(PrefixHit{}, 20));
  manager.free(r7);
  EXPECT_EQ(manager.num_free_blocks(), 5);
}

TEST(KvCacheManagerTest, SlidingGroupsNeedOnlyTheirWindow) {
  // Full and sliding (window 5) layers with equal pages, block size 4.
  const KvCachePlan plan =
      plan_for(model_of({full_layer(1, 8), sliding_layer(1, 8, 5)}), 12, /*max_model_len=*/16);
  KvCacheManager manager(plan);
  const int32_t r1 = manager.add_request();
  const int32_t r9 = manager.add_request();
  const std::vector<int32_t> a = tokens(12);
  manager.allocate_slots(r1, 12);
  manager.cache_full_blocks(r1, a, 12, {});
  const int32_t sliding_block_1 = manager.block_ids(r1, 1)[1];
  // The next query (position 12) sees tokens 8..12: sliding blocks 0 and 1 are freed.
  manager.free_outside_window(r1, 12);
  EXPECT_EQ(manager.block_ids(r1, 1)[0], 0);
  EXPECT_EQ(manager.block_ids(r1, 1)[1], 0);
  EXPECT_NE(manager.block_ids(r1, 1)[2], 0);
  EXPECT_EQ(manager.num_free_blocks(), 5 + 2);
  // Another request takes six blocks: the five never used, then the freed sliding block 1 (the
  // freed cached blocks are evicted last, tail first).
  manager.allocate_slots(r9, 12);
  EXPECT_EQ(manager.num_free_blocks(), 1);
  const std::span<const int32_t> taken_full = manager.block_ids(r9, 0);
  const std::span<const int32_t> taken_sliding = manager.block_ids(r9, 1);
  EXPECT_EQ(std::count(taken_full.begin(), taken_full.end(), sliding_block_1) +
                std::count(taken_sliding.begin(), taken_sliding.end(), sliding_block_1),
            1);
  // Full blocks 0..2 and sliding block 2 are still cached: the whole 12-token prefix hits,
  // although sliding block 1 is gone.
  std::vector<int32_t> b = a;
  b.push_back(77);
  const PrefixHit hit = manager.find_cached_prefix(b, {});
  EXPECT_EQ(hit.num_tokens, 12);
  EXPECT_EQ(hit.blocks[1], (std::vector<int32_t>{0, 0, manager.block_ids(r1, 1)[2]}));
  manager.free(r9);
  manager.free(r1);
  EXPECT_EQ(manager.num_free_blocks(), 11);
}

// computed() skips the rows with nothing to cache or free in a step; it must leave the tables, the
// pool and the prefix cache as calling cache_full_blocks() and free_outside_window() on every row
// every step does. Rows grow by random chunks, over full groups alone, and full and sliding ones
// of one block size and of two.
TEST(KvCacheManagerTest, ComputedDoesWhatTheTwoCallsDo) {
  const KvCachePlan full = plan_for(model_of({full_layer(1, 8)}), 60, /*max_model_len=*/64);
  const KvCachePlan one_size =
      plan_for(model_of({full_layer(1, 8), sliding_layer(1, 8, 5)}), 60, /*max_model_len=*/64);
  const KvCachePlan two_sizes =
      plan_kv_cache(kv_layers(model_of({full_layer(1, 16), sliding_layer(1, 8, 9)})),
                    {.num_blocks = 40, .max_model_len = 64});
  ASSERT_NE(two_sizes.groups[0].spec.page.block_size, two_sizes.groups[1].spec.page.block_size);
  for (const auto& [plan, caching] :
       {std::pair{&full, true}, std::pair{&one_size, true}, std::pair{&one_size, false},
        std::pair{&two_sizes, true}, std::pair{&two_sizes, false}}) {
    KvCacheManager batched(*plan);
    KvCacheManager each(*plan);
    std::mt19937 rng(caching ? 3 : 4);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> computed(3, 0);
    std::vector<int32_t> rows;
    for (int r = 0; r < 3; ++r) {
      prompts.push_back(tokens(64, r == 1 ? 10 : 100 * r));  // rows 0 and 1 share their tokens
      rows.push_back(batched.add_request());
      ASSERT_EQ(each.add_request(), rows.back());
    }
    while (computed[0] < 64 || computed[1] < 64 || computed[2] < 64) {
      std::vector<KvCacheManager::ComputedRow> done;
      for (int r = 0; r < 3; ++r) {
        computed[r] = std::min<int64_t>(64, computed[r] + 1 + rng() % 7);
        batched.allocate_slots(rows[r], computed[r]);
        each.allocate_slots(rows[r], computed[r]);
        done.push_back({rows[r], prompts[r], computed[r], {}});
      }
      batched.computed(done, caching);
      for (int r = 0; r < 3; ++r) {
        if (caching) each.cache_full_blocks(rows[r], prompts[r], computed[r], {});
        each.free_outside_window(rows[r], computed[r]);
      }
      ASSERT_EQ(batched.num_free_blocks(), each.num_free_blocks());
      for (int r = 0; r < 3; ++r) {
        for (int64_t g = 0; g < static_cast<int64_t>(plan->groups.size()); ++g) {
          const std::span<const int32_t> a = batched.block_ids(rows[r], g);
          const std::span<const int32_t> b = each.block_ids(rows[r], g);
          ASSERT_EQ(std::vector<int32_t>(a.begin(), a.end()),
                    std::vector<int32_t>(b.begin(), b.end()));
        }
        const std::span<const int32_t> prefix(prompts[r].data(), computed[r]);
        const PrefixHit hit = batched.find_cached_prefix(prefix, {});
        EXPECT_EQ(hit.num_tokens, each.find_cached_prefix(prefix, {}).num_tokens);
        EXPECT_EQ(hit.blocks, each.find_cached_prefix(prefix, {}).blocks);
        if (!caching) {
          EXPECT_EQ(hit.num_tokens, 0);
        }
      }
    }
    // Caching found the blocks again, windows freed some.
    if (plan->groups.size() > 1) {
      EXPECT_EQ(batched.block_ids(rows[2], 1).front(), 0);
    }
    if (caching) {
      EXPECT_GT(batched.find_cached_prefix(prompts[2], {}).num_tokens, 0);
    }
  }
}

TEST(KvCacheManagerTest, TablesKeepRowsAcrossGrowthAndReuseFreedOnes) {
  const KvCachePlan plan = plan_for(model_of({full_layer(1, 8)}), 60);
  KvCacheManager manager(plan);
  EXPECT_EQ(manager.table_stride(0), 16);  // 64 tokens in blocks of 4
  // More requests than the first rows: the tables grow and keep every row's blocks.
  std::vector<int32_t> rows;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 9; ++i) {
    rows.push_back(manager.add_request());
    manager.allocate_slots(rows.back(), 4 + i);
    const std::span<const int32_t> blocks = manager.block_ids(rows.back(), 0);
    expected.emplace_back(blocks.begin(), blocks.end());
  }
  for (int i = 0; i < 9; ++i) {
    const std::span<const int32_t> blocks = manager.block_ids(rows[i], 0);
    EXPECT_EQ(std::vector<int32_t>(blocks.begin(), blocks.end()), expected[i]);
    const int32_t* row = manager.table_data(0).data() + rows[i] * 16;
    EXPECT_TRUE(std::equal(blocks.begin(), blocks.end(), row));
  }
  // A freed request's row goes to the next request, cleared.
  const int32_t freed = rows[8];
  manager.free(freed);
  EXPECT_THROW(manager.block_ids(freed, 0), InternalError);  // no longer a request's
  const int32_t next = manager.add_request();
  EXPECT_EQ(next, freed);
  manager.allocate_slots(next, 1);
  EXPECT_EQ(manager.table_data(0)[next * 16 + 1], 0);
  EXPECT_THROW(manager.allocate_slots(next, 65), InternalError);  // past max_model_len
  rows[8] = next;
  for (int32_t row : rows)
    manager.free(row);
  EXPECT_EQ(manager.num_free_blocks(), 59);
}

// A model with only sliding-window layers holds a few blocks per request however long it runs (the
// plan asks for its window and one step's tokens), so its max_model_len may be huge: its tables
// start at most kMaxInitialTableBlocks wide (not one entry per block of max_model_len, which would
// be terabytes here) and widen as a request grows, keeping every row's entries.
TEST(KvCacheManagerTest, TablesWidenAsARequestOutgrowsThem) {
  const int64_t first_width = KvCacheManager::kMaxInitialTableBlocks;
  const KvCachePlan plan =
      plan_for(model_of({sliding_layer(1, 8, 5)}), 2100, /*max_model_len=*/int64_t{1} << 40);
  KvCacheManager manager(plan);
  const int32_t other = manager.add_request();
  const int32_t growing = manager.add_request();
  EXPECT_EQ(manager.table_stride(0), first_width);
  EXPECT_EQ(manager.table_data(0).size(), 4 * first_width);  // the first 4 rows
  manager.allocate_slots(other, 8);
  const std::span<const int32_t> other_blocks = manager.block_ids(other, 0);
  const std::vector<int32_t> kept(other_blocks.begin(), other_blocks.end());
  // 4 tokens a block: past 4 * first_width tokens the row needs more entries than it has.
  const int64_t length = 4 * first_width + 3000;
  for (int64_t n = 1000;; n = std::min(n + 1000, length)) {
    manager.allocate_slots(growing, n);
    manager.free_outside_window(growing, n);
    if (n == length) break;
  }
  EXPECT_EQ(manager.table_stride(0), 2 * first_width);
  const std::span<const int32_t> blocks = manager.block_ids(growing, 0);
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), length / 4);
  // Only the blocks the window (5 tokens: 2 blocks at most) still reaches are held; the rest are
  // the null block.
  EXPECT_NE(blocks.back(), 0);
  EXPECT_GE(std::count(blocks.begin(), blocks.end(), 0), static_cast<int64_t>(blocks.size()) - 2);
  const std::span<const int32_t> after = manager.block_ids(other, 0);
  EXPECT_EQ(std::vector<int32_t>(after.begin(), after.end()), kept);
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(),
                         manager.table_data(0).data() + other * manager.table_stride(0)));
  manager.free(growing);
  manager.free(other);
  EXPECT_EQ(manager.num_free_blocks(), 2099);
}

}  // namespace
}  // namespace pagoda
