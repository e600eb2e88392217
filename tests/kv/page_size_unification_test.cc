#include "kv/page_size_unification.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_test_configs.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

struct UnifyCase {
  const char* label;
  ModelConfig target;
  std::optional<ModelConfig> drafter;
  int64_t pool_page_bytes;
  // Per owning layer: its action, block size and physical page after unification.
  std::vector<PageAction> actions;
  std::vector<int64_t> block_sizes;
  std::vector<std::optional<int64_t>> padded;
};

TEST(PageSizeUnificationTest, Table) {
  const int64_t bf16 = 2;
  const UnifyCase cases[] = {
      // Test 1: identical layers keep their pages.
      {"two identical full layers",
       model_of({full_layer(2, 64), full_layer(2, 64)}),
       {},
       16 * 2 * 128 * bf16,
       {PageAction::kKept, PageAction::kKept},
       {16, 16},
       {{}, {}}},
      // Test 2: full and sliding with equal pages are both kept.
      {"full + sliding, equal pages",
       model_of({full_layer(2, 64), sliding_layer(2, 64, 32)}),
       {},
       16 * 2 * 128 * bf16,
       {PageAction::kKept, PageAction::kKept},
       {16, 16},
       {{}, {}}},
      // Test 3: full head 64 + sliding head 32: the sliding block size doubles.
      {"full 64 + sliding 32",
       model_of({full_layer(2, 64), sliding_layer(2, 32, 128)}),
       {},
       16 * 2 * 128 * bf16,
       {PageAction::kKept, PageAction::kScaled},
       {16, 32},
       {{}, {}}},
      // A 4x smaller page scales by 4.
      {"one KV head vs four",
       model_of({full_layer(4, 64), full_layer(1, 64)}),
       {},
       16 * 4 * 128 * bf16,
       {PageAction::kKept, PageAction::kScaled},
       {16, 64},
       {{}, {}}},
      // Test 4: target head 192 + drafter head 128 (3:2): padded, block size unchanged.
      {"target 192 + drafter 128",
       model_of({full_layer(2, 192)}),
       model_of({full_layer(2, 128)}),
       16 * 2 * 384 * bf16,
       {PageAction::kKept, PageAction::kPadded},
       {16, 16},
       {{}, 16 * 2 * 384 * bf16}},
      // Split K/V 192/128 target with a 128 drafter: 640 vs 512 bytes per head-token.
      {"split target + 128 drafter",
       model_of({full_layer(2, 192, 128)}),
       model_of({full_layer(2, 128)}),
       16 * 2 * 320 * bf16,
       {PageAction::kKept, PageAction::kPadded},
       {16, 16},
       {{}, 16 * 2 * 320 * bf16}},
  };
  for (const UnifyCase& c : cases) {
    SCOPED_TRACE(c.label);
    std::vector<KvLayer> layers = kv_layers(c.target, c.drafter ? &*c.drafter : nullptr);
    const PageUnification result = unify_page_sizes(layers);
    EXPECT_EQ(result.page_bytes, c.pool_page_bytes);
    ASSERT_EQ(layers.size(), c.actions.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      const KvSpec& spec = *layers[i].spec;
      EXPECT_EQ(spec.page_bytes(), c.pool_page_bytes) << "layer " << i;
      EXPECT_EQ(spec.page.block_size, c.block_sizes[i]) << "layer " << i;
      EXPECT_EQ(spec.padded_page_bytes, c.padded[i]) << "layer " << i;
      const auto decision =
          std::find_if(result.decisions.begin(), result.decisions.end(), [&](const auto& d) {
            return std::find(d.layers.begin(), d.layers.end(), int64_t(i)) != d.layers.end();
          });
      ASSERT_NE(decision, result.decisions.end());
      EXPECT_EQ(decision->action, c.actions[i]) << "layer " << i;
    }
  }
}

TEST(PageSizeUnificationTest, PaddingReportsWaste) {
  const ModelConfig drafter = model_of({full_layer(2, 128), full_layer(2, 128)});
  std::vector<KvLayer> layers = kv_layers(model_of({full_layer(2, 192)}), &drafter);
  const PageUnification result = unify_page_sizes(layers);
  ASSERT_EQ(result.decisions.size(), 2u);
  const PageDecision& padded = result.decisions[1];
  EXPECT_EQ(padded.action, PageAction::kPadded);
  EXPECT_EQ(padded.layers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(padded.before.page_bytes(), 16 * 2 * 256 * 2);
  EXPECT_EQ(padded.after.page_bytes(), 16 * 2 * 384 * 2);
  EXPECT_EQ(padded.after.real_page_bytes(), 16 * 2 * 256 * 2);
  EXPECT_DOUBLE_EQ(padded.waste_fraction(), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(result.decisions[0].waste_fraction(), 0.0);
}

// Test 4, second half: padding needs block-stride indexing.
TEST(PageSizeUnificationTest, PaddingWithoutBlockStrideIsAnError) {
  const LayersOutermostBackend backend;
  const ModelConfig target = model_of({full_layer(2, 192)});
  const ModelConfig drafter = model_of({full_layer(2, 128)});
  std::vector<KvLayer> layers = kv_layers(target, &drafter, &backend);
  expect_error([&] { unify_page_sizes(layers); },
               {"draft.model.layers.0.self_attn", "model.layers.0.self_attn", "16384 bytes",
                "24576", "'layers-outermost'", "block stride"});
  // Scaling needs no capability.
  const ModelConfig small = model_of({full_layer(1, 192)});
  std::vector<KvLayer> scalable = kv_layers(target, &small, &backend);
  EXPECT_NO_THROW(unify_page_sizes(scalable));
  EXPECT_EQ(scalable[1].spec->page.block_size, 32);
}

}  // namespace
}  // namespace pagoda
