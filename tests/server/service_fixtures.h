// A tiny real model, and one that fails on demand, for the tests of the serving layers.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "core/error.h"
#include "engine/engine_service.h"
#include "model/fixtures.h"

namespace pagoda::testing {

struct TinyModel {
  ModelConfig config;
  std::unique_ptr<CausalLm> model;
  KvCachePlan plan;
  KvCache memory;
  EngineConfig engine;

  TinyModel() {
    const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny";
    config = load_model_config(dir);
    WeightSource weights = WeightSource::from_checkpoint(dir);
    model = build_causal_lm(config, weights);
    plan = plan_on_cpu(config, nullptr, {.block_size = 4, .num_blocks = 300});
    memory = allocate_kv_cache(plan, Device::cpu());
    engine = {.vocab_size = config.vocab_size,
              .max_model_len = plan.max_model_len,
              .eos_token_ids = config.eos_token_ids};
  }
};

inline GenerationRequest request(int32_t first, int64_t max_tokens) {
  return {.prompt_token_ids = {first, 7, 9, first},
          .params = {.temperature = 0.0, .max_tokens = max_tokens, .ignore_eos = true}};
}

// Fails every step whose batch holds token 255, and takes at least `step_time` a step.
class PoisonedModel final : public CausalLm {
 public:
  explicit PoisonedModel(CausalLm& model) : model_(model) {}
  Tensor forward(const ForwardBatch& batch) override {
    ++calls;
    std::this_thread::sleep_for(step_time.load());
    for (int32_t token : batch.token_ids) {
      if (token == 255) fail("out of memory");
    }
    return model_.forward(batch);
  }
  Tensor compute_logits(const Tensor& hidden) override { return model_.compute_logits(hidden); }
  std::atomic<int64_t> calls{0};
  std::atomic<std::chrono::milliseconds> step_time{std::chrono::milliseconds(0)};

 private:
  CausalLm& model_;
};

}  // namespace pagoda::testing
