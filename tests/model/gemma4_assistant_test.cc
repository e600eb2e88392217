// The Gemma 4 assistant against transformers: four drafting steps after a target prefill, every
// assistant layer reading the target's caches with no K/V of its own.
#include "model/arch/gemma4_assistant.h"

#include <gtest/gtest.h>

#include <array>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attention/cpu/cpu_backend.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "model/fixtures.h"
#include "ops/ops.h"
#include "source_paths.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

using testing::fixture;

struct DraftCase {
  std::string target;     // checkpoint directory
  std::string assistant;  // checkpoint directory
  std::string reference;  // transformers' drafting steps (tools/make_fixtures.py's format)
};

std::string model(const std::string& name) {
  return std::string(PAGODA_SOURCE_DIR) + "/models/" + name;
}

int32_t argmax(const Tensor& logits) {
  return sample_greedy(compute_logprobs(logits), 0).front().token_id;
}

class Gemma4AssistantDraftTest : public ::testing::TestWithParam<DraftCase> {};

TEST_P(Gemma4AssistantDraftTest, DraftsLikeTransformers) {
  const DraftCase& c = GetParam();
  const ModelConfig target_config = load_model_config(c.target);
  const ModelConfig assistant_config = load_model_config(c.assistant);
  WeightSource target_weights = WeightSource::from_checkpoint(c.target);
  Gemma4Model target(target_config, target_weights);
  WeightSource assistant_weights = WeightSource::from_checkpoint(c.assistant);
  const Gemma4Assistant assistant(assistant_config, assistant_weights);
  EXPECT_TRUE(assistant_weights.unused().empty());

  // One pool for both: the assistant's layers own nothing.
  // f32 as the reference: bf16 checkpoints get an f32 cache too.
  const KvCachePlan plan =
      plan_on_cpu(target_config, &assistant_config,
                  {.dtype = DType::kF32, .block_size = 4, .max_model_len = 256, .num_blocks = 300});
  const int64_t target_layers = static_cast<int64_t>(target_config.layers.size());
  for (size_t i = target_layers; i < plan.layers.size(); ++i) {
    EXPECT_FALSE(plan.layers[i].owns_kv());
  }
  const KvCache cache = allocate_kv_cache(plan, Device::cpu());
  // The assistant's layers read the target's caches through plans of their own.
  std::vector<std::unique_ptr<AttentionPlan>> plans;
  for (const KvGroup& group : plan.groups) {
    plans.push_back(cpu_attention_backend().make_plan(
        {.page = group.spec.page, .max_model_len = 256, .device = Device::cpu()}));
  }
  std::vector<LayerAttention> assistant_layers;
  for (size_t i = target_layers; i < plan.layers.size(); ++i) {
    assistant_layers.push_back(
        {.cache = &cache.views[i], .plan = plans[plan.placements[i].group].get()});
  }

  std::ifstream file(c.reference);
  const nlohmann::json reference = nlohmann::json::parse(file);
  ModelRunner runner(target, plan, cache);
  for (const nlohmann::json& prompt : reference["prompts"]) {
    const auto ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>();
    const int64_t length = static_cast<int64_t>(ids.size());
    SCOPED_TRACE("prompt of " + std::to_string(length));
    KvCacheManager blocks(plan);
    Request request(0, ids, {}, 0);
    request.kv_row = blocks.add_request();
    blocks.allocate_slots(request.kv_row, length);
    const ForwardBatch target_batch =
        runner.prepare(std::array{ScheduledChunk{&request, 0, length}}, blocks);
    const Tensor hidden = target.forward(target_batch);
    const Tensor last_hidden = hidden.narrow(0, length - 1, 1).contiguous();
    int32_t token = argmax(target.compute_logits(last_hidden));
    EXPECT_EQ(token, prompt["target_token_id"].get<int32_t>());

    // The drafting batch: one query at the draft position, the target's pages as they are.
    ForwardBatch draft_batch;
    draft_batch.positions = {prompt["draft_position"].get<int64_t>()};
    draft_batch.attention = assistant_layers;
    std::vector<AttentionMetadata> metadata(plan.groups.size());
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      AttentionMetadata& meta = metadata[g];
      meta.num_actual_tokens = 1;
      meta.query_start = {0, 1};
      meta.seq_lens = {length};
      meta.block_table = blocks.table_data(g);
      meta.block_table_stride = blocks.table_stride(g);
      meta.block_table_rows = {request.kv_row};
      meta.slot_mapping = {-1};
      plans[g]->update(meta, {});
    }
    const Tensor cache_before = cache.buffers[0].clone();
    Tensor state = last_hidden;
    const auto expected_tokens = prompt["draft_token_ids"].get<std::vector<int32_t>>();
    for (size_t step = 0; step < expected_tokens.size(); ++step) {
      const DraftStep out = assistant.step(target.embed({token}), state, draft_batch);
      token = argmax(out.logits);
      EXPECT_EQ(token, expected_tokens[step]) << "step " << step;
      for (const nlohmann::json& top : prompt["draft_top_logits"][step]) {
        EXPECT_NEAR(out.logits.data<float>()[top[0].get<int32_t>()], top[1].get<double>(), 1e-4)
            << "step " << step;
      }
      state = out.hidden;
    }
    // Drafting wrote nothing into the target's cache.
    EXPECT_EQ(
        std::memcmp(cache_before.raw_data(), cache.buffers[0].raw_data(), cache_before.numel()), 0);
  }
}

// The tiny random drafter, and the default model's trained one.
INSTANTIATE_TEST_SUITE_P(
    Checkpoints, Gemma4AssistantDraftTest,
    ::testing::Values(DraftCase{fixture("gemma4-tiny"), fixture("gemma4-assistant-tiny"),
                                fixture("gemma4-assistant-tiny") + "/reference.json"},
                      DraftCase{model("kjv-gemma4"), model("kjv-gemma4-assistant"),
                                fixture("kjv-gemma4") + "/assistant_reference.json"}));

TEST(Gemma4AssistantTest, OrderedLogitsKeepOnlyTheTopCentroidsTokens) {
  // Vocabulary 6 in 3 centroids of 2 tokens; the top centroid owns tokens 4 and 1.
  Tensor hidden = Tensor::empty({1, 2}, DType::kF32);
  hidden.data<float>()[0] = 1.0f;
  hidden.data<float>()[1] = 0.0f;
  Tensor centroids = Tensor::empty({3, 2}, DType::kF32);
  const float centroid_values[] = {0.1f, 0, 5.0f, 0, -1.0f, 0};
  std::memcpy(centroids.raw_data(), centroid_values, sizeof(centroid_values));
  Tensor head = Tensor::empty({6, 2}, DType::kF32);
  for (int t = 0; t < 6; ++t)
    head.data<float>()[t * 2] = static_cast<float>(t);
  Tensor ordering = Tensor::empty({6}, DType::kI32);
  const int32_t order[] = {0, 2, 4, 1, 3, 5};
  std::memcpy(ordering.raw_data(), order, sizeof(order));
  const Tensor logits =
      ops::centroid_masked_logits(hidden, head, ops::linear(hidden, centroids), ordering, 1);
  EXPECT_EQ(logits.at<float>({0, 4}), 4.0f);
  EXPECT_EQ(logits.at<float>({0, 1}), 1.0f);
  for (int t : {0, 2, 3, 5})
    EXPECT_EQ(logits.at<float>({0, t}), 0.0f);  // min(4, 1) - 1
}

}  // namespace
}  // namespace pagoda
