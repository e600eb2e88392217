#include "kv/kv_groups.h"

#include <gtest/gtest.h>

#include "kv/kv_test_configs.h"
#include "kv/page_size_unification.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

std::vector<KvGroup> groups_of(const ModelConfig& model) {
  std::vector<KvLayer> layers = kv_layers(model);
  unify_page_sizes(layers);
  return group_kv_layers(layers);
}

std::vector<LayerAttentionConfig> repeat(const LayerAttentionConfig& layer, int count) {
  return std::vector<LayerAttentionConfig>(count, layer);
}

TEST(KvGroupsTest, IdenticalLayersFormOneGroup) {
  const std::vector<KvGroup> groups = groups_of(model_of({full_layer(2, 64), full_layer(2, 64)}));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].layers, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(slots_per_block(groups), 2);
}

// Test 2: full + sliding with equal pages: two groups whose i-th layers share tensor slot i.
TEST(KvGroupsTest, FullAndSlidingNeverShareAGroup) {
  const std::vector<KvGroup> groups = groups_of(model_of(
      {full_layer(2, 64), sliding_layer(2, 64, 32), full_layer(2, 64), sliding_layer(2, 64, 32)}));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].spec.kind, AttentionKind::kFull);
  EXPECT_EQ(groups[0].layers, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(groups[1].spec.kind, AttentionKind::kSliding);
  EXPECT_EQ(groups[1].layers, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(slots_per_block(groups), 2);
}

TEST(KvGroupsTest, GroupSizeFollowsTheSmallestSet) {
  // 3 full + 12 sliding: groups of 3, so four sliding groups and one full group.
  std::vector<LayerAttentionConfig> layers = repeat(sliding_layer(1, 32, 64), 12);
  for (int i = 0; i < 3; ++i)
    layers.push_back(full_layer(1, 64));
  const std::vector<KvGroup> groups = groups_of(model_of(layers));
  ASSERT_EQ(groups.size(), 5u);
  for (const KvGroup& group : groups)
    EXPECT_EQ(group.layers.size(), 3u);
  EXPECT_EQ(groups[4].spec.kind, AttentionKind::kFull);
  EXPECT_EQ(groups[0].spec.page.block_size, 32);  // scaled: head 32 vs 64
}

TEST(KvGroupsTest, NearlyEqualSetsTakeOneGroupEach) {
  // 5 full and 6 sliding: 6 < 1.25 * 5, so one group each (6 slots; one unused by the full group).
  std::vector<LayerAttentionConfig> layers = repeat(full_layer(1, 64), 5);
  for (int i = 0; i < 6; ++i)
    layers.push_back(sliding_layer(1, 64, 64));
  const std::vector<KvGroup> groups = groups_of(model_of(layers));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(slots_per_block(groups), 6);
  // 4 full and 6 sliding: 6 >= 1.25 * 4, so groups of 4 (the sliding set splits in two).
  layers.erase(layers.begin());
  EXPECT_EQ(groups_of(model_of(layers)).size(), 3u);
}

TEST(KvSpecTest, MergeKeepsEveryField) {
  const KvSpec padded{.kind = AttentionKind::kSliding,
                      .sliding_window = 48,
                      .page = {.block_size = 16,
                               .num_kv_heads = 2,
                               .head_size_k = 128,
                               .head_size_v = 128,
                               .dtype = DType::kBF16},
                      .padded_page_bytes = 24576,
                      .indexes_kv_by_block_stride = true};
  const KvSpec merged = merge_kv_specs({padded, padded});
  EXPECT_EQ(merged, padded);
  KvSpec weaker = padded;
  weaker.indexes_kv_by_block_stride = false;
  EXPECT_FALSE(merge_kv_specs({padded, weaker}).indexes_kv_by_block_stride);
  KvSpec other_window = padded;
  other_window.sliding_window = 64;
  EXPECT_THROW(merge_kv_specs({padded, other_window}), InternalError);
}

TEST(KvSpecTest, BlocksForTokens) {
  KvSpec full{.kind = AttentionKind::kFull,
              .page = {.block_size = 16, .num_kv_heads = 1, .head_size_k = 8, .head_size_v = 8}};
  EXPECT_EQ(full.blocks_for_tokens(0, 1), 0);
  EXPECT_EQ(full.blocks_for_tokens(16, 1), 1);
  EXPECT_EQ(full.blocks_for_tokens(17, 8192), 2);
  EXPECT_EQ(full.blocks_for_tokens(1000, 1), 63);
  KvSpec sliding = full;
  sliding.kind = AttentionKind::kSliding;
  sliding.sliding_window = 33;
  // One token a step: it sees 32 earlier ones, which span at most 3 blocks.
  EXPECT_EQ(sliding.blocks_for_tokens(20, 1), 2);
  EXPECT_EQ(sliding.blocks_for_tokens(1000, 1), 3);
  // 64 tokens a step: the 33 + 63 tokens from the window of the step's first query to its last
  // token span at most 1 + ceil(95 / 16) = 7 blocks.
  EXPECT_EQ(sliding.blocks_for_tokens(1000, 64), 7);
  // Never more than the sequence has, nor a step longer than the sequence.
  EXPECT_EQ(sliding.blocks_for_tokens(40, 8192), 3);
  EXPECT_EQ(sliding.blocks_for_tokens(100, 8192), 7);
}

}  // namespace
}  // namespace pagoda
