// The committed transformers fixtures (tests/fixtures/, made by tools/make_fixtures.py): a
// checkpoint with its reference outputs, loaded on the CPU with a small KV pool, and runs of
// requests through the engine.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/cache_config.h"
#include "engine/engine.h"

namespace pagoda::testing {

struct Fixture {
  ModelConfig config;
  std::unique_ptr<CausalLm> model;
  KvCachePlan plan;
  KvCache memory;
  nlohmann::json reference;
};

// A fixture's checkpoint is beside its reference.json, or for the default model under models/.
inline std::string checkpoint_dir(const std::string& name) {
  const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name;
  if (std::filesystem::exists(dir + "/config.json")) return dir;
  return std::string(PAGODA_SOURCE_DIR) + "/models/" + name;
}

// The KV cache plan of `config` for `target` (and `drafter`) on the CPU.
inline KvCachePlan plan_on_cpu(const ModelConfig& target, const ModelConfig* drafter,
                               const CacheConfig& config) {
  return plan_cache(target, drafter, resolve_cache_config(config, target, Device::cpu()));
}

// A fresh KV pool of `num_blocks` small blocks (every prompt spans several) for the fixture, in
// float32 as the reference computes: bf16 checkpoints get an f32 cache too.
inline void replan(Fixture& fixture, int64_t num_blocks, int64_t max_model_len) {
  fixture.plan = plan_on_cpu(fixture.config, nullptr,
                             {.dtype = DType::kF32,
                              .block_size = 4,
                              .max_model_len = max_model_len,
                              .num_blocks = num_blocks});
  fixture.memory = allocate_kv_cache(fixture.plan, Device::cpu());
}

inline std::unique_ptr<Fixture> load_fixture(const std::string& name) {
  const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name;
  auto fixture = std::make_unique<Fixture>();
  fixture->config = load_model_config(checkpoint_dir(name));
  WeightSource weights = WeightSource::from_checkpoint(checkpoint_dir(name));
  fixture->model = build_causal_lm(fixture->config, weights);
  EXPECT_TRUE(weights.unused().empty());
  replan(*fixture, 300, 256);
  std::ifstream file(dir + "/reference.json");
  fixture->reference = nlohmann::json::parse(file);
  return fixture;
}

inline std::vector<Request> run(Fixture& fixture, const std::vector<GenerationRequest>& requests,
                                const SchedulerConfig& scheduler = {},
                                GenerationStats* stats = nullptr) {
  const EngineConfig config{.vocab_size = fixture.config.vocab_size,
                            .max_model_len = fixture.plan.max_model_len,
                            .eos_token_ids = fixture.config.eos_token_ids,
                            .scheduler = scheduler};
  return generate(*fixture.model, fixture.plan, fixture.memory, config, requests, stats);
}

inline GenerationRequest request_for(const nlohmann::json& prompt) {
  return {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
          .params = {.temperature = 0.0,
                     .max_tokens = static_cast<int64_t>(prompt["greedy_token_ids"].size()),
                     .ignore_eos = true,
                     .logprobs = 5,
                     .prompt_logprobs = 5}};
}

inline std::vector<int32_t> token_ids(const Request& result) {
  const std::span<const int32_t> ids = result.output_token_ids();
  return {ids.begin(), ids.end()};
}

}  // namespace pagoda::testing
