// config.json for every architecture: parsing, then planning a small KV cache for what parsed, so
// that the arithmetic on the config's numbers is exercised too; and a model small enough to build
// from dummy weights is built, so that every field its layers read is read, and runs a short
// request, so that every layer runs at the shapes the config gives it.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/device.h"
#include "core/files.h"
#include "engine/cache_config.h"
#include "engine/engine.h"
#include "fuzz/fuzz_util.h"
#include "model/architectures.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "model/weights.h"

using namespace pagoda;

namespace {

// The most weights a built model may have: each input builds in about a millisecond, and the
// fuzzer's memory stays small.
constexpr double kMaxBuiltWeights = 1 << 20;

// Whether `config`'s weights, MoE experts included (the estimate leaves them out), stay under
// kMaxBuiltWeights.
bool small_enough_to_build(const ModelConfig& config) {
  const Architecture& arch = find_architecture(config.architecture);
  if (arch.build == nullptr) return false;
  const nlohmann::json& text = config.text_config;
  const auto number = [&](const char* key) {
    const auto it = text.find(key);
    return it != text.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  const double experts = std::max(number("num_experts"), number("n_routed_experts"));
  const double expert_inner =
      std::max(number("moe_intermediate_size"), number("intermediate_size"));
  const double moe = 3.0 * experts * expert_inner * static_cast<double>(config.hidden_size) *
                     static_cast<double>(config.layers.size());
  return arch.estimate_weights(config).params + moe <= kMaxBuiltWeights;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  std::optional<ModelConfig> config;
  fuzz::expect_clean_errors(
      [&] { config = parse_model_config(parse_json_text(text, "config.json"), "config.json"); });
  if (!config) return 0;
  // The plan and the model each on their own: a config the plan refuses may still build.
  std::optional<KvCachePlan> plan;
  fuzz::expect_clean_errors([&] {
    const CacheConfig cache{.block_size = 16, .max_model_len = 64, .num_blocks = 64};
    plan = plan_cache(*config, nullptr, resolve_cache_config(cache, *config, Device::cpu()));
  });
  fuzz::expect_clean_errors([&] {
    if (!small_enough_to_build(*config)) return;
    WeightSource weights = WeightSource::dummy(DType::kF32, 1);
    const std::unique_ptr<CausalLm> model = build_causal_lm(*config, weights);
    if (!plan) return;
    // A prompt and two tokens through the model: every layer's shapes at run time.
    const KvCache cache = allocate_kv_cache(*plan, Device::cpu());
    const EngineConfig engine{.vocab_size = config->vocab_size,
                              .max_model_len = plan->max_model_len,
                              .eos_token_ids = config->eos_token_ids};
    const int32_t last = static_cast<int32_t>(config->vocab_size - 1);
    (void)generate(*model, *plan, cache, engine,
                   {{.prompt_token_ids = {0, last, 0}, .params = {.max_tokens = 2}}});
  });
  return 0;
}
