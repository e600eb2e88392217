// A checkpoint's KV cache scales (<attn>.k_scale and .v_scale, or one .kv_scale) are read by the
// attention layers and used by an e4m3 cache (their arithmetic is in tests/attention): llama-tiny
// with scale tensors of 1 runs exactly as without them; with k_scale 1e-3 (K stored times 1000,
// saturating at 448) the e4m3 cache's log-probabilities move, while a bf16 cache ignores the
// scales; a scale that is not finite and positive is refused, naming the tensor.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/error.h"
#include "model/fixtures.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

// llama-tiny's checkpoint beside a second file holding `scales` (name -> value, stored as
// one-element f32 tensors of shape []), joined by an index, in a fresh directory.
std::string checkpoint_with(const std::map<std::string, float>& scales) {
  static int made = 0;
  const std::string source = checkpoint_dir("llama-tiny");
  const std::string dir = ::testing::TempDir() + "pagoda_kv_scales_" + std::to_string(::getpid()) +
                          "_" + std::to_string(made++);
  std::filesystem::create_directories(dir);
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
  return dir;
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
  EXPECT_EQ(largest_difference(prompt_logprobs(checkpoint_with(ones), DType::kF8E4M3), fp8), 0.0);
  const std::string saturating = checkpoint_with(tiny);
  EXPECT_GT(largest_difference(prompt_logprobs(saturating, DType::kF8E4M3), fp8), 0.1);
  EXPECT_EQ(largest_difference(prompt_logprobs(saturating, DType::kBF16), bf16), 0.0);

  const std::string negative = checkpoint_with({{"model.layers.1.self_attn.v_scale", -2.0f}});
  try {
    prompt_logprobs(negative, DType::kF8E4M3);
    ADD_FAILURE() << "a negative KV cache scale was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("model.layers.1.self_attn.v_scale"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace pagoda
