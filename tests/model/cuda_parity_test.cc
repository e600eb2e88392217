// The fixtures on a GPU (bf16 weights, activations and KV cache) against transformers' f32
// reference and against the CPU path, with CUDA graphs and without. Skipped without a device.
//
// The GPU runs bf16 weights, activations and KV cache; the CPU path here runs the same
// bf16-rounded weights and bf16 KV cache with f32 activations, so the two differ by bf16
// activation rounding alone. On the trained default model (a bf16 checkpoint) that keeps prompt
// log-probabilities within 1e-2 on average and 5e-2 at worst, against transformers too. The tiny
// random-weight fixtures are more sensitive to it (measured: means 2e-2 to 5e-2, worst 0.4 on
// gemma4-tiny), so they are held to 6e-2 and 0.5, and against transformers, whose f32 weights the
// GPU rounds, only to a 0.1 mean that a broken path would far exceed. Greedy sequences may part
// only at a near-tie: where the GPU's token and the other side's are within 0.1 in the GPU's own
// log-probabilities; except in MoE models, where rounding can flip a routing decision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/fixtures.h"
#include "model/gpu_runs.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

constexpr double kTrainedMean = 1e-2;
constexpr double kTrainedWorst = 5e-2;
constexpr double kRandomMean = 6e-2;
constexpr double kRandomWorst = 0.5;
constexpr double kRoundedWeightsMean = 0.1;
// A tiny MoE model's routing can flip under bf16 rounding (its router margins are ~1e-3), and one
// flipped choice moves that position's log-probability by up to ~1 (measured 0.92 on
// mimo-fp8-tiny); the mean still holds every position to kRandomMean.
constexpr double kMoeWorst = 1.5;

// `skips`: layers kept in bf16 beside an e4m3 cache (--kv-cache-dtype-skip-layers).
ModelRun run(const std::string& name, Device device, bool enforce_eager,
             const nlohmann::json& prompts, DType cache_dtype = DType::kBF16,
             const KvDtypeSkips& skips = {}) {
  const ModelConfig config = load_model_config(checkpoint_dir(name));
  WeightSource weights = WeightSource::from_checkpoint(checkpoint_dir(name));
  weights.set_device(device);
  weights.round_to_bf16_on_host();
  const std::unique_ptr<CausalLm> model = build_causal_lm(config, weights);
  // Both paths round K and V to the cache's dtype. Pages of mixed dtypes may not unify by scaling
  // (bf16 sliding pages as large as e4m3 full ones keep blocks of 4 tokens), so a sequence may
  // take more blocks than with one dtype.
  const CacheConfig cache_config = resolve_cache_config({.dtype = cache_dtype,
                                                         .dtype_skips = skips,
                                                         .skip_dtype = DType::kBF16,
                                                         .block_size = 4,
                                                         .max_model_len = 256,
                                                         .num_blocks = 600},
                                                        config, device);
  const KvCachePlan plan = plan_cache(config, nullptr, cache_config);
  const KvCache cache = allocate_kv_cache(plan, device);
  const EngineConfig engine{.vocab_size = config.vocab_size,
                            .max_model_len = plan.max_model_len,
                            .eos_token_ids = config.eos_token_ids,
                            .enforce_eager = enforce_eager};
  const std::vector<GenerationRequest> requests = greedy_requests(prompts);
  // All prompts in one batch: prefill steps run eagerly, the decode steps of 1..N sequences
  // replay graphs padded to 1, 2, 4 or 8.
  return collect_run(generate(*model, plan, cache, engine, requests, nullptr));
}

// A fixture's name as a test name: dashes become underscores.
std::string fixture_test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CudaParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaParityTest, MatchesTransformersAndTheCpuPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string name = GetParam();
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name +
                     "/reference.json");
  const nlohmann::json prompts = nlohmann::json::parse(file)["prompts"];
  std::vector<std::vector<double>> reference;
  std::vector<std::vector<int32_t>> reference_tokens;
  for (const nlohmann::json& prompt : prompts) {
    const auto all = prompt["prompt_logprobs"];
    reference.emplace_back();
    for (size_t i = 1; i < all.size(); ++i)
      reference.back().push_back(all[i].get<double>());
    reference_tokens.push_back(prompt["greedy_token_ids"].get<std::vector<int32_t>>());
  }
  const ModelRun cpu = run(name, Device::cpu(), true, prompts);
  const ModelRun eager = run(name, Device::cuda(0), true, prompts);
  const ModelRun graphs = run(name, Device::cuda(0), false, prompts);

  const ModelConfig config = load_model_config(checkpoint_dir(name));
  const bool trained = config.dtype == DType::kBF16;  // the default model's bf16 checkpoint
  const bool moe = config.architecture == "MiMoV2FlashForCausalLM";
  const Difference vs_cpu = compare(eager.prompt_logprobs, cpu.prompt_logprobs);
  EXPECT_LE(vs_cpu.mean, trained ? kTrainedMean : kRandomMean);
  EXPECT_LE(vs_cpu.worst, trained ? kTrainedWorst : moe ? kMoeWorst : kRandomWorst);
  const Difference vs_reference = compare(eager.prompt_logprobs, reference);
  if (trained) {
    EXPECT_LE(vs_reference.mean, kTrainedMean);
    EXPECT_LE(vs_reference.worst, kTrainedWorst);
  } else {
    EXPECT_LE(vs_reference.mean, kRoundedWeightsMean);
  }
  // Prompt log-probabilities come from prefill steps, which graphs leave alone: identical.
  EXPECT_EQ(compare(graphs.prompt_logprobs, eager.prompt_logprobs).worst, 0.0);
  const double vs_transformers = check_greedy(eager.tokens, reference_tokens, moe);
  const double vs_cpu_tokens = check_greedy(eager.tokens, ids_of(cpu.tokens), moe);
  const double graphs_vs_eager = check_greedy(graphs.tokens, ids_of(eager.tokens), false);
  std::printf(
      "[ cuda     ] %s: prompt logprobs vs cpu (bf16 weights) mean %.2e worst %.2e, vs "
      "transformers mean %.2e worst %.2e; greedy tokens before a near-tie split: vs "
      "transformers %.2f, vs cpu %.2f, graphs vs eager %.2f\n",
      name.c_str(), vs_cpu.mean, vs_cpu.worst, vs_reference.mean, vs_reference.worst,
      vs_transformers, vs_cpu_tokens, graphs_vs_eager);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParityTest,
                         ::testing::Values("llama-tiny", "llama3-rope-tiny", "qwen3-tiny",
                                           "gemma4-tiny", "gemma4-noshare-tiny", "mimo-tiny",
                                           "kjv-gemma4", "llama-fp8-tiny", "mimo-fp8-tiny"),
                         fixture_test_name);

// An e4m3 KV cache (--kv-cache-dtype fp8) on the GPU against the CPU path with the same cache.
// Both round K and V to e4m3, the GPU from bf16 activations and the CPU from f32 ones, so where the
// two land on different e4m3 neighbours (12.5% apart at most) they differ by about what e4m3
// itself costs (the CPU's e4m3 cache against f32 on the default model: mean 0.029, worst 0.21;
// tests/model/fp8_quality_test.cc). The default model is held to the random fixtures' bf16 bounds
// and its greedy tokens may part only at a near-tie; the random fixtures amplify the flips
// (measured means 0.09-0.16, worst 0.84) and are held to kFp8RandomMean and kFp8RandomWorst, which
// a kernel that misreads pages exceeds by far. Graphs and eager agree exactly. Fixtures whose e4m3
// K/V rows are whole 16-byte pieces (the CUDA kernels' copies): MiMo's 24-wide K heads are not.
constexpr double kFp8RandomMean = 0.25;
constexpr double kFp8RandomWorst = 1.2;

class CudaFp8KvParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaFp8KvParityTest, MatchesTheCpuPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string name = GetParam();
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name +
                     "/reference.json");
  const nlohmann::json prompts = nlohmann::json::parse(file)["prompts"];
  const ModelRun cpu = run(name, Device::cpu(), true, prompts, DType::kF8E4M3);
  const ModelRun eager = run(name, Device::cuda(0), true, prompts, DType::kF8E4M3);
  const ModelRun graphs = run(name, Device::cuda(0), false, prompts, DType::kF8E4M3);
  const bool trained = load_model_config(checkpoint_dir(name)).dtype == DType::kBF16;
  const Difference vs_cpu = compare(eager.prompt_logprobs, cpu.prompt_logprobs);
  EXPECT_LE(vs_cpu.mean, trained ? kRandomMean : kFp8RandomMean);
  EXPECT_LE(vs_cpu.worst, trained ? kRandomWorst : kFp8RandomWorst);
  EXPECT_EQ(compare(graphs.prompt_logprobs, eager.prompt_logprobs).worst, 0.0);
  const double vs_cpu_tokens = trained ? check_greedy(eager.tokens, ids_of(cpu.tokens), false) : 0;
  const double graphs_vs_eager = check_greedy(graphs.tokens, ids_of(eager.tokens), false);
  std::printf(
      "[ cuda fp8 ] %s: e4m3 cache, prompt logprobs vs cpu mean %.2e worst %.2e; greedy tokens "
      "before a near-tie split: vs cpu %.2f (the default model only), graphs vs eager %.2f\n",
      name.c_str(), vs_cpu.mean, vs_cpu.worst, vs_cpu_tokens, graphs_vs_eager);

  // --kv-cache-dtype-skip-layers: every layer that owns KV kept in bf16 is the bf16 cache's run,
  // bit for bit; the sliding-window layers kept in bf16 beside e4m3 pages match the CPU path as
  // the all-e4m3 cache does.
  const ModelConfig config = load_model_config(checkpoint_dir(name));
  KvDtypeSkips every;
  bool sliding = false;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    if (config.layers[i].kv_source == KvSource::kOwn)
      every.layers.push_back(static_cast<int64_t>(i));
    sliding = sliding || config.layers[i].kind == AttentionKind::kSliding;
  }
  const ModelRun kept = run(name, Device::cuda(0), true, prompts, DType::kF8E4M3, every);
  const ModelRun bf16 = run(name, Device::cuda(0), true, prompts, DType::kBF16);
  EXPECT_EQ(compare(kept.prompt_logprobs, bf16.prompt_logprobs).worst, 0.0);
  EXPECT_EQ(ids_of(kept.tokens), ids_of(bf16.tokens));
  if (!sliding) return;
  const KvDtypeSkips windows{.sliding_window = true};
  const ModelRun cpu_mixed = run(name, Device::cpu(), true, prompts, DType::kF8E4M3, windows);
  const ModelRun cuda_mixed = run(name, Device::cuda(0), false, prompts, DType::kF8E4M3, windows);
  const Difference mixed = compare(cuda_mixed.prompt_logprobs, cpu_mixed.prompt_logprobs);
  EXPECT_LE(mixed.mean, trained ? kRandomMean : kFp8RandomMean);
  EXPECT_LE(mixed.worst, trained ? kRandomWorst : kFp8RandomWorst);
  std::printf(
      "[ cuda fp8 ] %s: sliding layers in bf16 beside e4m3 pages, vs cpu mean %.2e worst %.2e\n",
      name.c_str(), mixed.mean, mixed.worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFp8KvParityTest,
                         ::testing::Values("llama-tiny", "qwen3-tiny", "gemma4-tiny", "kjv-gemma4",
                                           "llama-fp8-tiny"),
                         fixture_test_name);

}  // namespace
}  // namespace pagoda
