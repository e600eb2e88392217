#include "kv/kv_cache_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_test_configs.h"
#include "source_paths.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

ModelConfig example(const std::string& name) {
  return load_model_config(testing::example_config(name));
}

KvCachePlan plan(const ModelConfig& target, const ModelConfig* drafter,
                 const KvCacheOptions& options) {
  return plan_kv_cache(kv_layers(target, drafter), options);
}

TEST(KvCachePlanTest, BlockCountFromMemoryBudget) {
  const ModelConfig model = model_of({full_layer(2, 64), full_layer(2, 64)});
  const int64_t page = 16 * 2 * 128 * 2;
  const KvCachePlan p =
      plan(model, nullptr, {.memory_bytes = 100 * 2 * page + page, .max_model_len = 64});
  EXPECT_EQ(p.slots_per_block, 2);
  EXPECT_EQ(p.bytes_per_block_id(), 2 * page);
  EXPECT_EQ(p.num_blocks, 100);
  EXPECT_EQ(p.total_bytes(), 100 * 2 * page);
  ASSERT_EQ(p.buffers.size(), 2u);
  EXPECT_EQ(p.buffers[0].size_bytes, 100 * page);
  // 99 usable blocks of 16 tokens.
  EXPECT_EQ(p.max_sequence_tokens(), 99 * 16);
  EXPECT_DOUBLE_EQ(p.max_concurrency(), 99.0 / 4);
  // --num-blocks wins; no budget plans exactly one max_model_len sequence.
  EXPECT_EQ(plan(model, nullptr, {.num_blocks = 7, .max_model_len = 64}).num_blocks, 7);
  EXPECT_EQ(plan(model, nullptr, {.max_model_len = 64}).num_blocks, 4 + kNullBlocks);
}

TEST(KvCachePlanTest, TooSmallBudgetNamesTheNumbers) {
  const ModelConfig model = model_of({full_layer(2, 64)});
  expect_error([&] { plan(model, nullptr, {.memory_bytes = 1 << 20, .max_model_len = 4096}); },
               {"1.00 MiB", "128 blocks", "max_model_len 4096", "257 blocks", "--kv-cache-memory"});
  expect_error([&] { plan(model, nullptr, {.num_blocks = 4, .max_model_len = 64}); },
               {"4 KV blocks", "needs 5 blocks"});
  expect_error([&] { plan(model, nullptr, {.max_model_len = 0}); }, {"max_model_len is 0"});
  // Sizes past what int64 byte arithmetic can hold are refused, not wrapped.
  expect_error([&] { plan(model, nullptr, {.num_blocks = int64_t{1} << 62, .max_model_len = 64}); },
               {"limit of a KV pool"});
  expect_error(
      [&] { plan(model, nullptr, {.memory_bytes = int64_t{1} << 62, .max_model_len = 64}); },
      {"KV cache memory"});
  expect_error([&] { plan(model, nullptr, {.max_model_len = int64_t{1} << 60}); },
               {"max_model_len is"});
}

TEST(KvCachePlanTest, SlidingGroupsNeedOnlyTheirWindow) {
  // One full layer and one sliding layer (window 64) of equal pages.
  const ModelConfig model = model_of({full_layer(1, 64), sliding_layer(1, 64, 64)});
  const KvCachePlan p =
      plan(model, nullptr, {.num_blocks = 101, .max_model_len = 1024, .max_tokens_per_step = 1});
  EXPECT_EQ(p.blocks_for_sequence(1024), 64 + 5);  // window spans at most ceil(63/16) + 1
  EXPECT_EQ(p.max_sequence_tokens(), 95 * 16);     // 100 usable = 95 full + 5 sliding
  // Steps of 256 tokens hold the window and the step: 1 + ceil((64 + 254) / 16) = 21 blocks.
  const KvCachePlan chunked =
      plan(model, nullptr, {.num_blocks = 101, .max_model_len = 1024, .max_tokens_per_step = 256});
  EXPECT_EQ(chunked.blocks_for_sequence(1024), 64 + 21);
  EXPECT_EQ(chunked.max_sequence_tokens(), 79 * 16);
  const ModelConfig sliding_only = model_of({sliding_layer(1, 64, 64)});
  EXPECT_EQ(plan(sliding_only, nullptr, {.max_model_len = 1024}).max_sequence_tokens(),
            std::nullopt);
}

TEST(KvCachePlanTest, InterleavedPlacement) {
  const ModelConfig model = model_of(
      {full_layer(2, 64), sliding_layer(2, 64, 32), full_layer(2, 64), sliding_layer(2, 64, 32)});
  const KvCachePlan p =
      plan(model, nullptr,
           {.num_blocks = 10, .max_model_len = 64, .layout = KvBufferLayout::kInterleaved});
  const int64_t page = p.page_bytes();
  ASSERT_EQ(p.buffers.size(), 1u);
  EXPECT_EQ(p.buffers[0].size_bytes, 10 * 2 * page);
  EXPECT_EQ(p.placements[2].slot, 1);
  EXPECT_EQ(p.placements[2].pages.offset_bytes, page);
  EXPECT_EQ(p.placements[2].pages.block_stride_bytes, 2 * page);
  EXPECT_EQ(p.placements[1].pages.offset_bytes, 0);  // slot 0 of the sliding group

  const LayersOutermostBackend backend;
  const ModelConfig drafter = model_of({full_layer(2, 64)});
  expect_error(
      [&] {
        plan_kv_cache(
            kv_layers(model, &drafter, &backend),
            {.num_blocks = 100, .max_model_len = 64, .layout = KvBufferLayout::kInterleaved});
      },
      {"interleaved", "'layers-outermost'", "draft.model.layers.0.self_attn"});
}

// Test 7: configs shaped like the real models.
TEST(KvCachePlanTest, Gemma4E2B) {
  const KvCachePlan p = plan(example("gemma-4-e2b"), nullptr, {.max_model_len = 8192});
  EXPECT_EQ(p.page_bytes(), 16 * 1 * 1024 * 2);  // full layer: head 512, one KV head
  ASSERT_EQ(p.unification.decisions.size(), 2u);
  EXPECT_EQ(p.unification.decisions[0].action, PageAction::kScaled);  // sliding, head 256
  EXPECT_EQ(p.unification.decisions[0].after.page.block_size, 32);
  EXPECT_EQ(p.unification.decisions[1].action, PageAction::kKept);
  EXPECT_EQ(p.groups.size(), 5u);  // 12 sliding owners in groups of 3, and 3 full owners
  EXPECT_EQ(p.slots_per_block, 3);
  EXPECT_EQ(p.buffers.size(), 3u);
  // The 20 shared layers own nothing and take their source's placement.
  int owners = 0;
  for (const KvLayer& layer : p.layers)
    owners += layer.owns_kv();
  EXPECT_EQ(owners, 15);
  EXPECT_EQ(p.placements[34].buffer, p.placements[14].buffer);
}

TEST(KvCachePlanTest, Gemma4E4BWithAssistant) {
  const ModelConfig target = example("gemma-4-e4b");
  const ModelConfig assistant = example("gemma-4-e4b-assistant");
  const KvCachePlan with = plan(target, &assistant, {.max_model_len = 4096});
  const KvCachePlan without = plan(target, nullptr, {.max_model_len = 4096});
  ASSERT_EQ(with.layers.size(), 46u);
  EXPECT_EQ(with.layers[42].source, 22);
  EXPECT_EQ(with.layers[45].source, 23);
  // The assistant adds no KV memory at all.
  EXPECT_EQ(with.total_bytes(), without.total_bytes());
  EXPECT_EQ(with.groups.size(), without.groups.size());
}

TEST(KvCachePlanTest, MiMoV2FlashWith128Drafter) {
  const ModelConfig target = example("mimo-v2-flash");
  const ModelConfig drafter = example("mimo-v2-flash-draft-128");
  const KvCachePlan p = plan(target, &drafter, {.max_model_len = 4096});
  // Sliding: 8 heads x (192 + 128) is the largest page; full (4 heads) scales x2; the drafter's
  // 8 heads x 256 = 4/5 of it pads.
  EXPECT_EQ(p.page_bytes(), 16 * 8 * 320 * 2);
  for (const PageDecision& d : p.unification.decisions) {
    if (d.before.page.num_kv_heads == 4) {
      EXPECT_EQ(d.action, PageAction::kScaled);
      EXPECT_EQ(d.scale, 2);
    } else if (d.before.page.head_size_v == 128 && d.before.page.head_size_k == 128) {
      EXPECT_EQ(d.action, PageAction::kPadded);
      EXPECT_EQ(d.after.page.block_size, 16);
      EXPECT_DOUBLE_EQ(d.waste_fraction(), 0.2);
    } else {
      EXPECT_EQ(d.action, PageAction::kKept);
    }
  }
}

TEST(KvCachePlanTest, AllocatedViewsAliasAsPlanned) {
  // Layers 0, 2 full; 1, 3 sliding with half the head (scaled); 4 shares layer 2.
  const ModelConfig model = model_of({full_layer(1, 16), sliding_layer(1, 8, 32), full_layer(1, 16),
                                      sliding_layer(1, 8, 32), sharing(full_layer(1, 16), 2)});
  const ModelConfig drafter = model_of({full_layer(1, 8), full_layer(1, 8)});
  const KvCachePlan p = plan_kv_cache(kv_layers(model, &drafter, nullptr, DType::kF32),
                                      {.num_blocks = 16, .max_model_len = 64});
  const KvCache cache = allocate_kv_cache(p, Device::cpu());
  ASSERT_EQ(cache.views.size(), 7u);
  // The sharing layer sees its source's bytes.
  EXPECT_EQ(cache.views[4].key.raw_data(), cache.views[2].key.raw_data());
  // Writing block 3 of one layer leaves every other layer of its buffer untouched at block 3
  // only when they are in the same group (different slots); across groups the slot is shared by
  // design, since a block id belongs to one group at a time.
  for (size_t i = 0; i < cache.views.size(); ++i) {
    if (!p.layers[i].owns_kv()) continue;
    for (const Tensor& buffer : cache.buffers)
      buffer.fill(0);
    cache.views[i].key.select(0, 3).fill(1.0);
    for (size_t j = 0; j < cache.views.size(); ++j) {
      if (j == i || !p.layers[j].owns_kv()) continue;
      const bool same_bytes = p.placements[j].buffer == p.placements[i].buffer &&
                              p.placements[j].slot == p.placements[i].slot;
      const float seen = cache.views[j].key.select(0, 3).contiguous().view({-1}).at<float>({0});
      EXPECT_EQ(seen != 0.0f, same_bytes) << "layers " << i << " and " << j;
      if (same_bytes) {
        EXPECT_NE(p.placements[j].group, p.placements[i].group);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
