// The seed behaviours, end to end: a KV-sharing layer never computes or receives K/V and writes
// nothing; padding rows of a padded batch are never read as data; a drafter whose pages are padded
// computes exactly what it computes in an unpadded pool of its own.
#include <gtest/gtest.h>

#include <array>

#include <cstring>
#include <random>

#include "engine/model_runner.h"
#include "model/arch/gemma4.h"
#include "model/fixtures.h"
#include "model/layers/rope_config.h"
#include "source_paths.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

using testing::fixture;

bool same_bytes(const KvCache& a, const KvCache& b) {
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    if (std::memcmp(a.buffers[i].raw_data(), b.buffers[i].raw_data(), a.buffers[i].numel()) != 0) {
      return false;
    }
  }
  return true;
}

KvCache snapshot(const KvCache& cache) {
  KvCache copy;
  for (const Tensor& buffer : cache.buffers)
    copy.buffers.push_back(buffer.clone());
  return copy;
}

const std::vector<int32_t> kPrompt = {5, 17, 200, 3, 99, 42, 7, 7, 130, 64, 1, 250};

TEST(KvSharingProofTest, SharedLayerHasNoKvAndWritesNothing) {
  const ModelConfig config = load_model_config(fixture("gemma4-tiny"));
  WeightSource weights = WeightSource::from_checkpoint(fixture("gemma4-tiny"));
  Gemma4Model model(config, weights);
  const KvCachePlan plan = plan_on_cpu(config, nullptr, {.block_size = 4, .num_blocks = 200});
  const KvCache cache = allocate_kv_cache(plan, Device::cpu());
  KvCacheManager blocks(plan);
  ModelRunner runner(model, plan, cache);
  std::vector<int32_t> tokens = kPrompt;
  tokens.push_back(9);
  Request request(0, tokens, {}, 0);
  request.kv_row = blocks.add_request();
  blocks.allocate_slots(request.kv_row, static_cast<int64_t>(tokens.size()));
  const int64_t prompt = static_cast<int64_t>(kPrompt.size());
  model.forward(runner.prepare(std::array{ScheduledChunk{&request, 0, prompt}}, blocks));

  // Layer 4 shares layer 3's sliding cache: the checkpoint has no k/v weights for it, and a
  // standalone copy of it loads without them.
  EXPECT_FALSE(plan.layers[4].owns_kv());
  EXPECT_EQ(plan.layers[4].source, 3);
  WeightSource layer_weights = WeightSource::from_checkpoint(fixture("gemma4-tiny"));
  for (const char* missing : {"k_proj", "v_proj", "k_norm"}) {
    EXPECT_FALSE(layer_weights.has(std::string("model.layers.4.self_attn.") + missing + ".weight"));
  }
  const RopeParams rope =
      parse_rope_object(ConfigReader(config.text_config, config.source),
                        config.text_config["rope_parameters"]["sliding_attention"],
                        config.layers[4].head_size_k, 1e4);
  const SelfAttention shared(layer_weights, "model.layers.4.self_attn", config.hidden_size,
                             config.layers[4], rope,
                             {.qk_norm = true, .v_norm = true, .scale = 1.0f});
  // A decode step at the next position: the shared layer attends and the cache does not change.
  const ForwardBatch batch =
      runner.prepare(std::array{ScheduledChunk{&request, prompt, 1}}, blocks);
  Tensor x = Tensor::empty({1, config.hidden_size}, DType::kF32);
  std::mt19937 rng(3);
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = std::normal_distribution<float>()(rng);
  const KvCache before = snapshot(cache);
  const Tensor out = shared.forward(x, batch, 4);
  EXPECT_TRUE(same_bytes(before, cache));
  for (int64_t i = 0; i < out.numel(); ++i)
    ASSERT_TRUE(std::isfinite(out.data<float>()[i]));
}

TEST(KvSharingProofTest, PaddingRowsAreNeverRead) {
  const ModelConfig config = load_model_config(fixture("gemma4-tiny"));
  WeightSource weights = WeightSource::from_checkpoint(fixture("gemma4-tiny"));
  Gemma4Model model(config, weights);
  const KvCachePlan plan = plan_on_cpu(config, nullptr, {.block_size = 4, .num_blocks = 200});
  Request request(0, kPrompt, {}, 0);
  const int64_t real = static_cast<int64_t>(kPrompt.size());
  const std::array prefill{ScheduledChunk{&request, 0, real}};

  auto run = [&](int64_t padding, KvCache& cache) {
    KvCacheManager blocks(plan);
    request.kv_row = blocks.add_request();
    blocks.allocate_slots(request.kv_row, real);
    ModelRunner runner(model, plan, cache);
    ForwardBatch batch = runner.prepare(prefill, blocks, padding);
    // Poison the padding rows: other tokens at other positions.
    for (int64_t t = real; t < real + padding; ++t) {
      batch.token_ids[t] = static_cast<int32_t>(250 - t);
      batch.positions[t] = 100 + t;
    }
    return model.forward(batch);
  };
  KvCache plain = allocate_kv_cache(plan, Device::cpu());
  KvCache padded = allocate_kv_cache(plan, Device::cpu());
  const Tensor expected = run(0, plain);
  const Tensor hidden = run(5, padded);
  ASSERT_EQ(hidden.size(0), real + 5);
  EXPECT_TRUE(same_bytes(plain, padded));  // padding rows wrote nothing
  for (int64_t t = 0; t < real; ++t) {
    for (int64_t h = 0; h < hidden.size(1); ++h) {
      ASSERT_NEAR(hidden.at<float>({t, h}), expected.at<float>({t, h}), 1e-5) << t << " " << h;
    }
  }
}

// A MiMo-shaped drafter with smaller heads than mimo-tiny: its pages do not divide the target's.
ModelConfig small_head_drafter() {
  nlohmann::json config = {{"architectures", {"MiMoV2FlashForCausalLM"}},
                           {"hidden_size", 48},
                           {"intermediate_size", 64},
                           {"num_hidden_layers", 2},
                           {"num_attention_heads", 4},
                           {"num_key_value_heads", 1},
                           {"head_dim", 16},
                           {"v_head_dim", 16},
                           {"layer_types", {"full_attention", "sliding_attention"}},
                           {"mlp_layer_types", {"dense", "dense"}},
                           {"sliding_window", 6},
                           {"attention_value_scale", 0.707},
                           {"max_position_embeddings", 256},
                           {"vocab_size", 256},
                           {"dtype", "float32"}};
  return parse_model_config(config, "drafter/config.json");
}

Tensor drafter_logits(CausalLm& drafter, const KvCachePlan& plan, int64_t first_layer) {
  const KvCache cache = allocate_kv_cache(plan, Device::cpu());
  KvCacheManager blocks(plan);
  ModelRunner runner(drafter, plan, cache, {.first_layer = first_layer});
  std::vector<int32_t> tokens = kPrompt;
  tokens.push_back(77);
  Request request(0, tokens, {}, 0);
  request.kv_row = blocks.add_request();
  blocks.allocate_slots(request.kv_row, static_cast<int64_t>(tokens.size()));
  const int64_t prompt = static_cast<int64_t>(kPrompt.size());
  const Tensor prefill =
      runner.execute(std::array{ScheduledChunk{&request, 0, prompt}}, std::array{prompt}, blocks)
          .logits;
  const Tensor decode =
      runner
          .execute(std::array{ScheduledChunk{&request, prompt, 1}}, std::array{int64_t{1}}, blocks)
          .logits;
  Tensor both = Tensor::empty({prefill.size(0) + 1, prefill.size(1)}, DType::kF32);
  both.narrow(0, 0, prefill.size(0)).copy_from(prefill);
  both.narrow(0, prefill.size(0), 1).copy_from(decode);
  return both;
}

TEST(KvSharingProofTest, PaddedDrafterComputesWhatItComputesUnpadded) {
  const ModelConfig target = load_model_config(fixture("mimo-tiny"));
  const ModelConfig drafter_config = small_head_drafter();
  WeightSource weights = WeightSource::dummy(DType::kF32, 11);
  std::unique_ptr<CausalLm> drafter = build_causal_lm(drafter_config, weights);

  const CacheConfig cache{.block_size = 4, .num_blocks = 400};
  const KvCachePlan shared = plan_on_cpu(target, &drafter_config, cache);
  const KvCachePlan own = plan_on_cpu(drafter_config, nullptr, cache);
  const int64_t first_drafter_layer = static_cast<int64_t>(target.layers.size());
  // In the shared pool the drafter's pages are padded; alone they are not.
  bool padded = false;
  for (const PageDecision& decision : shared.unification.decisions) {
    if (decision.layers.front() >= first_drafter_layer) {
      EXPECT_EQ(decision.action, PageAction::kPadded);
      padded = true;
    }
  }
  EXPECT_TRUE(padded);
  for (const PageDecision& decision : own.unification.decisions) {
    EXPECT_NE(decision.action, PageAction::kPadded);
  }
  const Tensor in_shared_pool = drafter_logits(*drafter, shared, first_drafter_layer);
  const Tensor in_own_pool = drafter_logits(*drafter, own, 0);
  ASSERT_EQ(in_shared_pool.shape(), in_own_pool.shape());
  EXPECT_EQ(
      std::memcmp(in_shared_pool.raw_data(), in_own_pool.raw_data(), in_shared_pool.numel() * 4),
      0);
}

}  // namespace
}  // namespace pagoda
