// A checkpoint's KV cache scales (<attn>.k_scale and .v_scale, or one .kv_scale) are read by the
// attention layers and used by an e4m3 cache (their arithmetic is in tests/attention): llama-tiny
// with scale tensors of 1 runs exactly as without them; with k_scale 1e-3 (K stored times 1000,
// saturating at 448) the e4m3 cache's log-probabilities move, while a bf16 cache ignores the
// scales; a scale that is not finite and positive (or is subnormal) is refused, naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "engine/proposer.h"
#include "engine/speculative_config.h"
#include "model/arch/gemma4_assistant.h"
#include "model/fixtures.h"
#include "scratch_dir.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

// The checkpoint `name` (llama-tiny unless given) beside a second file holding `scales` (name ->
// value, stored as one-element f32 tensors of shape []), joined by an index, in a fresh directory.
ScratchDir checkpoint_with(const std::map<std::string, float>& scales,
                           const std::string& name = "llama-tiny") {
  const std::string source = checkpoint_dir(name);
  ScratchDir scratch("kv_scales");
  const std::string& dir = scratch.path();
  for (const char* file : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(source + "/" + file, dir + "/" + file);
  std::ifstream in(source + "/model.safetensors", std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  std::string text(length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(length));
  nlohmann::json index = {{"metadata", nlohmann::json::object()},
                          {"weight_map", nlohmann::json::object()}};
  const nlohmann::json stored = nlohmann::json::parse(text);
  for (const auto& [name, entry] : stored.items()) {
    if (name != "__metadata__") index["weight_map"][name] = "model.safetensors";
  }
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, value] : scales) {
    header[name] = {{"dtype", "F32"},
                    {"shape", nlohmann::json::array()},
                    {"data_offsets", {data.size(), data.size() + 4}}};
    data.append(reinterpret_cast<const char*>(&value), 4);
    index["weight_map"][name] = "scales.safetensors";
  }
  std::string header_text = header.dump();
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');
  const uint64_t header_length = header_text.size();
  std::ofstream out(dir + "/scales.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header_length), 8);
  out << header_text << data;
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  return scratch;
}

// The prompt log-probabilities of llama-tiny's reference prompts from the checkpoint in `dir`,
// with a KV cache of `dtype`.
std::vector<double> prompt_logprobs(const std::string& dir, DType dtype) {
  Fixture fixture;
  fixture.config = load_model_config(dir);
  WeightSource weights = WeightSource::from_checkpoint(dir);
  fixture.model = build_causal_lm(fixture.config, weights);
  fixture.plan =
      plan_on_cpu(fixture.config, nullptr,
                  {.dtype = dtype, .block_size = 4, .max_model_len = 256, .num_blocks = 300});
  fixture.memory = allocate_kv_cache(fixture.plan, Device::cpu());
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(file);
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : reference["prompts"])
    requests.push_back(request_for(prompt));
  EXPECT_FALSE(requests.empty());
  std::vector<double> out;
  for (const Request& result : run(fixture, requests)) {
    EXPECT_TRUE(result.error.empty()) << result.error;
    for (size_t i = 1; i < result.prompt_logprobs.size(); ++i)
      out.push_back(result.prompt_logprobs[i]->logprob);
  }
  return out;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(KvCacheScalesTest, AreReadAndUsedByAnFp8Cache) {
  const std::string plain = checkpoint_dir("llama-tiny");
  const std::vector<double> fp8 = prompt_logprobs(plain, DType::kF8E4M3);
  const std::vector<double> bf16 = prompt_logprobs(plain, DType::kBF16);
  std::map<std::string, float> ones, tiny;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
    ones[prefix + "k_scale"] = ones[prefix + "v_scale"] = 1.0f;
    tiny[prefix + "kv_scale"] = 1e-3f;
  }
  EXPECT_EQ(largest_difference(prompt_logprobs(checkpoint_with(ones).path(), DType::kF8E4M3), fp8),
            0.0);
  const ScratchDir saturating = checkpoint_with(tiny);
  EXPECT_GT(largest_difference(prompt_logprobs(saturating.path(), DType::kF8E4M3), fp8), 0.1);
  EXPECT_EQ(largest_difference(prompt_logprobs(saturating.path(), DType::kBF16), bf16), 0.0);

  // Negative, and subnormal (whose inverse, which the cache is written with, is infinite).
  for (const float bad : {-2.0f, 1e-40f}) {
    const ScratchDir refused = checkpoint_with({{"model.layers.1.self_attn.v_scale", bad}});
    try {
      prompt_logprobs(refused.path(), DType::kF8E4M3);
      ADD_FAILURE() << "a KV cache scale of " << bad << " was accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("model.layers.1.self_attn.v_scale"),
                std::string::npos)
          << error.what();
    }
  }
}

// The Gemma 4 assistant reads the target's caches, so it reads them with the scales of the layers
// it reads (the target's last full and last sliding layer that own KV), set when the speculative
// proposer pairs the two.
TEST(KvCacheScalesTest, TheAssistantReadsWithItsTargetsScales) {
  std::map<std::string, float> scales;
  const ModelConfig plain = load_model_config(checkpoint_dir("kjv-gemma4"));
  for (size_t i = 0; i < plain.layers.size(); ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".self_attn.";
    if (plain.layers[i].kv_source != KvSource::kOwn) continue;
    scales[prefix + "k_scale"] = 0.5f + 0.25f * static_cast<float>(i);
    scales[prefix + "v_scale"] = 2.0f + 0.5f * static_cast<float>(i);
  }
  const ScratchDir scratch = checkpoint_with(scales, "kjv-gemma4");
  const std::string& dir = scratch.path();
  const ModelConfig config = load_model_config(dir);
  WeightSource weights = WeightSource::from_checkpoint(dir);
  std::unique_ptr<CausalLm> target = build_causal_lm(config, weights);
  const SpeculativeConfig speculative = parse_speculative_config(
      nlohmann::json{{"model", std::string(PAGODA_SOURCE_DIR) + "/models/kjv-gemma4-assistant"},
                     {"num_speculative_tokens", 2}}
          .dump(),
      dir, config);
  Drafter drafter = load_drafter(speculative, Device::cpu());
  ASSERT_NE(drafter.assistant, nullptr);
  const KvCachePlan plan = plan_on_cpu(
      config, &speculative.drafter,
      {.dtype = DType::kF8E4M3, .block_size = 4, .max_model_len = 64, .num_blocks = 64});
  const KvCache memory = allocate_kv_cache(plan, Device::cpu());
  const Engine engine(*target, plan, memory, {.vocab_size = config.vocab_size, .max_model_len = 64},
                      &drafter);  // pairs them
  const auto& gemma4 = dynamic_cast<const Gemma4Model&>(*target);
  for (size_t i = 0; i < speculative.drafter.layers.size(); ++i) {
    const LayerAttentionConfig& layer = speculative.drafter.layers[i];
    int64_t source = -1;
    for (size_t j = 0; j < config.layers.size(); ++j) {
      if (config.layers[j].kind == layer.kind && config.layers[j].kv_source == KvSource::kOwn) {
        source = static_cast<int64_t>(j);
      }
    }
    ASSERT_GE(source, 0);
    EXPECT_EQ(drafter.assistant->text().cache_scales(static_cast<int64_t>(i)),
              gemma4.cache_scales(source))
        << "drafter layer " << layer.name;
    EXPECT_NE(gemma4.cache_scales(source), std::make_pair(1.0f, 1.0f));
  }
}

}  // namespace
}  // namespace pagoda
