#include "kv/kv_layers.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_test_configs.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

TEST(KvLayersTest, OwnersGetSpecs) {
  const ModelConfig model = model_of({full_layer(2, 64), sliding_layer(2, 32, 128)});
  const std::vector<KvLayer> layers = kv_layers(model);
  ASSERT_EQ(layers.size(), 2u);
  ASSERT_TRUE(layers[0].owns_kv());
  EXPECT_EQ(layers[0].spec->page.block_size, 16);
  EXPECT_EQ(layers[0].spec->page.head_size_k, 64);
  EXPECT_EQ(layers[0].spec->real_page_bytes(), 16 * 2 * 128 * 2);
  EXPECT_TRUE(layers[0].spec->indexes_kv_by_block_stride);
  EXPECT_EQ(layers[1].spec->kind, AttentionKind::kSliding);
  EXPECT_EQ(layers[1].spec->sliding_window, 128);
}

// Test 5: shared layers allocate nothing and resolve to their source.
TEST(KvLayersTest, SharingLayersResolveToTheirSource) {
  const ModelConfig model = model_of(
      {sliding_layer(1, 32, 64), full_layer(1, 64), sharing(sliding_layer(1, 32, 64), 0),
       sharing(full_layer(1, 64), 1), sharing(sliding_layer(1, 32, 32), 2)});  // chains to 0
  const std::vector<KvLayer> layers = kv_layers(model);
  EXPECT_FALSE(layers[2].owns_kv());
  EXPECT_FALSE(layers[3].owns_kv());
  EXPECT_EQ(layers[2].source, 0);
  EXPECT_EQ(layers[3].source, 1);
  EXPECT_EQ(layers[4].source, 0);
}

// --kv-cache-dtype-skip-layers: sliding owners and named ones keep skip_dtype in an e4m3 cache;
// sharing layers read their source's pages; a drafter's layers are not the target's to skip.
TEST(KvLayersTest, SkippedLayersKeepTheirDtype) {
  const ModelConfig model =
      model_of({sliding_layer(1, 32, 64), full_layer(1, 64), sharing(sliding_layer(1, 32, 64), 0),
                sharing(full_layer(1, 64), 1), full_layer(1, 64)});
  const auto dtypes = [&](const KvDtypeSkips& skips, const ModelConfig* drafter = nullptr) {
    const std::vector<KvLayer> layers = build_kv_layers(model, drafter,
                                                        {.dtype = DType::kF8E4M3,
                                                         .skips = skips,
                                                         .skip_dtype = DType::kBF16,
                                                         .backend = &cpu_attention_backend()});
    std::vector<DType> out;
    for (const KvLayer& layer : layers) {
      const int64_t owner = layer.owns_kv() ? &layer - layers.data() : layer.source;
      out.push_back(layers[owner].spec->page.dtype);
    }
    return out;
  };
  constexpr DType e4m3 = DType::kF8E4M3, bf16 = DType::kBF16;
  EXPECT_EQ(dtypes({}), std::vector<DType>(5, e4m3));
  EXPECT_EQ(dtypes({.sliding_window = true}), (std::vector<DType>{bf16, e4m3, bf16, e4m3, e4m3}));
  EXPECT_EQ(dtypes({.layers = {4, 1}}), (std::vector<DType>{e4m3, bf16, e4m3, bf16, bf16}));
  EXPECT_EQ(dtypes({.sliding_window = true}, &model),
            (std::vector<DType>{bf16, e4m3, bf16, e4m3, e4m3, e4m3, e4m3, e4m3, e4m3, e4m3}));
}

TEST(KvLayersTest, BadSourcesNameBothLayers) {
  expect_error(
      [] {
        kv_layers(model_of({full_layer(1, 64), sharing(full_layer(1, 64), 9)}));
      },
      {"model.layers.1.self_attn", "layer index 9", "does not exist"});
  expect_error(
      [] {
        kv_layers(model_of({sharing(full_layer(1, 64), 1), full_layer(1, 64)}));
      },
      {"model.layers.0.self_attn", "model.layers.1.self_attn", "not an earlier layer"});
  expect_error(
      [] {
        kv_layers(model_of({full_layer(1, 64), sharing(full_layer(1, 64), 1)}));
      },
      {"model.layers.1.self_attn", "not an earlier layer"});
  expect_error(
      [] {
        kv_layers(model_of({full_layer(1, 64), sharing(sliding_layer(1, 64, 32), 0)}));
      },
      {"model.layers.1.self_attn (sliding)", "model.layers.0.self_attn", "full layer"});
  expect_error(
      [] {
        kv_layers(model_of({full_layer(1, 64), sharing(full_layer(1, 128), 0)}));
      },
      {"model.layers.1.self_attn", "model.layers.0.self_attn", "must match"});
  expect_error(
      [] {
        kv_layers(model_of({sliding_layer(1, 64, 16), sharing(sliding_layer(1, 64, 32), 0)}));
      },
      {"window of 32", "keeps only 16"});
}

TEST(KvLayersTest, DrafterReadsTargetsLastOwnerOfKind) {
  const ModelConfig target =
      model_of({sliding_layer(2, 32, 64), full_layer(2, 64), sliding_layer(2, 32, 64),
                full_layer(2, 64), sharing(sliding_layer(2, 32, 64), 2)});
  const ModelConfig drafter = model_of(
      {reading_target(sliding_layer(2, 32, 64)), reading_target(full_layer(2, 64))}, "draft.json");
  const std::vector<KvLayer> layers = kv_layers(target, &drafter);
  ASSERT_EQ(layers.size(), 7u);
  EXPECT_EQ(layers[5].name, "draft.model.layers.0.self_attn");
  EXPECT_TRUE(layers[5].is_drafter());
  EXPECT_FALSE(layers[5].owns_kv());
  EXPECT_EQ(layers[5].source, 2);  // not the shared layer 4
  EXPECT_EQ(layers[6].source, 3);

  expect_error([&] { kv_layers(drafter); }, {"draft.json", "only runs as a drafter"});
  const ModelConfig sliding_only = model_of({sliding_layer(2, 32, 64)});
  expect_error([&] { kv_layers(sliding_only, &drafter); },
               {"draft.model.layers.1.self_attn", "last full layer", "has none"});
}

TEST(KvLayersTest, OwnCacheDrafterBringsItsOwnSpecs) {
  const ModelConfig target = model_of({full_layer(2, 192)});
  const ModelConfig drafter = model_of({full_layer(2, 128)});
  const std::vector<KvLayer> layers = kv_layers(target, &drafter);
  ASSERT_TRUE(layers[1].owns_kv());
  EXPECT_EQ(layers[1].spec->page.head_size_k, 128);
}

TEST(KvLayersTest, BackendMustSupportTheLayers) {
  const PagedAttentionBackend plain("plain", PageOrder::kNhd, {});
  const ModelConfig target = model_of({full_layer(1, 64)});
  const ModelConfig sliding = model_of({sliding_layer(1, 64, 32)});
  expect_error([&] { kv_layers(target, &sliding, &plain); },
               {"draft.model.layers.0.self_attn", "sliding-window", "'plain'"});
  const ModelConfig split = model_of({full_layer(1, 192, 128)});
  expect_error([&] { kv_layers(target, &split, &plain); },
               {"K head size 192", "V head size 128", "'plain'"});
}

// What a backend's kernels take is checked when the cache is planned, before weights load, with
// the layer and the limit named.
TEST(KvLayersTest, BackendShapesAndDtypesAreCheckedAtPlanning) {
  const PagedAttentionBackend narrow("narrow", PageOrder::kNhd,
                                     {.features = kAllAttentionFeatures,
                                      .head_sizes = {{64, 64}, {192, 128}},
                                      .max_q_per_kv = 4,
                                      .cache_dtypes = {DType::kBF16}});
  const ModelConfig target = model_of({full_layer(1, 64)});
  expect_error([&] { kv_layers(target, &target, &narrow, DType::kF32); },
               {"draft.model.layers.0.self_attn", "'narrow'", "bfloat16, not float32"});
  const ModelConfig wide = model_of({full_layer(1, 64), full_layer(2, 96)});
  expect_error(
      [&] { kv_layers(target, &wide, &narrow); },
      {"draft.model.layers.1.self_attn", "K/V head sizes 96/96", "takes head sizes 64, 192/128"});
  ModelConfig grouped = model_of({full_layer(1, 64)});
  grouped.layers[0].num_q_heads = 8;
  expect_error([&] { kv_layers(target, &grouped, &narrow); },
               {"draft.model.layers.0.self_attn", "8 query heads per KV head", "at most 4"});
  EXPECT_NO_THROW(kv_layers(target, &target, &narrow));
}

// A backend that copies rows in 16-byte pieces takes a 24-wide K head in bfloat16 (48 bytes) but
// not in e4m3 (24 bytes).
TEST(KvLayersTest, RowBytesAreCheckedPerDtype) {
  const PagedAttentionBackend pieces("pieces", PageOrder::kNhd,
                                     {.features = kAllAttentionFeatures, .row_bytes_multiple = 16});
  const ModelConfig model = model_of({full_layer(1, 24, 16)});
  const auto plan = [&](DType dtype) {
    return build_kv_layers(model, nullptr, {.dtype = dtype, .backend = &pieces});
  };
  EXPECT_NO_THROW(plan(DType::kBF16));
  expect_error([&] { plan(DType::kF8E4M3); },
               {"model.layers.0.self_attn", "'pieces'", "pieces of 16 bytes",
                "24 float8_e4m3 elements is 24 bytes"});
}

#if PAGODA_HAVE_CUDA
// The CUDA kernels' limits, declared by their backend, refuse a model before it runs.
TEST(KvLayersTest, TheCudaBackendRefusesWhatItsKernelsCannotRun) {
  const ModelConfig model = model_of({full_layer(2, 128), full_layer(2, 96)});
  expect_error(
      [&] {
        build_kv_layers(model, nullptr,
                        {.dtype = DType::kBF16, .backend = &find_attention_backend("cuda")});
      },
      {"model.layers.1.self_attn", "K/V head sizes 96/96", "'cuda'", "128, 192/128"});
}
#endif

TEST(KvLayersTest, SomeLayerMustOwnKv) {
  ModelConfig model = model_of({full_layer(1, 64)});
  model.layers.clear();
  expect_error([&] { kv_layers(model); }, {"no attention layer owns KV"});
}

}  // namespace
}  // namespace pagoda
