// GPU ranks, checked on one GPU: every rank's shard of a fixture lives on the same device and runs
// on its own thread, as the engine runs one rank per GPU, and the collectives between them are
// staged through the host (make_host_staged_group) instead of NCCL, so steps run eagerly. Under TP
// the ranks hold their heads, MLP columns and experts; under DCP the CUDA attention walks each
// rank's share of every sequence's keys and the CUDA merge combines the shares. The greedy tokens
// and prompt log-probabilities must be one GPU's, up to bf16 rounding of sums taken in another
// order: prompt log-probabilities within the CUDA parity test's tolerances for random weights (a
// mean of 6e-2, 0.5 at worst), and greedy sequences that part only at a near-tie (0.1), except in
// MoE models. Skipped without a device.
//
// With a GPU per rank (CudaNcclParallelTest), the same splits run over NCCL through the library
// facade, as `pagoda serve` builds its engine, with CUDA graphs and eagerly, against one GPU run
// the same way. Skipped on machines with fewer GPUs than ranks.
//
// mimo-tiny runs under TP only: DCP rounds each rank's attention output to bf16 before the merge,
// and its random-weight router turns that into other experts. Rounding only those parts on the
// CPU moves its log-probabilities by up to 2.1 (0.02 to 0.06 for the other fixtures); the CPU
// ranks check its DCP exactly (tensor_parallel_test.cc).
#include <gtest/gtest.h>

#include <fstream>

#include "engine/llm.h"
#include "engine/proposer.h"
#include "engine/speculative_config.h"
#include "model/fixtures.h"
#include "model/gpu_runs.h"
#include "model/tensor_parallel.h"
#include "parallel/cpu_communicator.h"
#include "parallel/nccl_communicator.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

constexpr double kMean = 6e-2;
constexpr double kWorst = 0.5;

struct Split {
  int tp = 1;
  int dcp = 1;
  int interleave = 1;
};

struct GpuRun {
  ModelRun run;
  GenerationStats stats;
};

// The fixture's reference prompts on `split` ranks sharing GPU 0, greedy, with the drafter fixture
// `drafter` drafting 3 tokens when named.
GpuRun run_ranks(const std::string& name, const Split& split, const std::string& drafter = "") {
  const Device device = Device::cuda(0);
  const ModelConfig config = load_model_config(checkpoint_dir(name));
  const int ranks = static_cast<int>(world_size(split.tp, split.dcp));
  std::vector<std::unique_ptr<Communicator>> communicators;
  if (ranks > 1) communicators = make_host_staged_group(ranks);
  const auto place = [&](int r) {
    return rank_place(split.tp, split.dcp, r, ranks > 1 ? communicators[r].get() : nullptr);
  };
  std::vector<std::unique_ptr<CausalLm>> models;
  for (int r = 0; r < ranks; ++r) {
    WeightSource weights = WeightSource::from_checkpoint(checkpoint_dir(name));
    weights.set_device(device);
    models.push_back(build_causal_lm(config, weights, place(r)));
  }
  std::vector<std::unique_ptr<Drafter>> drafters;
  std::optional<ModelConfig> drafter_config;
  if (!drafter.empty()) {
    const SpeculativeConfig spec = parse_speculative_config(
        fmt::format(R"({{"model": "{}", "num_speculative_tokens": 3}})", checkpoint_dir(drafter)),
        checkpoint_dir(name), config);
    for (int r = 0; r < ranks; ++r)
      drafters.push_back(
          std::make_unique<Drafter>(load_drafter(spec, device, std::nullopt, 0, place(r))));
    drafter_config = rank_model_config(spec.drafter, split.tp, split.dcp);
  }
  const ModelConfig planned = rank_model_config(config, split.tp, split.dcp);
  CacheConfig cache_config{.dtype = DType::kBF16,
                           .block_size = 4,
                           .max_model_len = 256,
                           .num_blocks = 300,
                           .context_parallel_size = split.dcp,
                           .context_interleave = split.interleave};
  cache_config = resolve_cache_config(cache_config, planned, device);
  const KvCachePlan plan =
      plan_cache(planned, drafter_config ? &*drafter_config : nullptr, cache_config);
  std::vector<KvCache> caches;
  for (int r = 0; r < ranks; ++r)
    caches.push_back(allocate_kv_cache(plan, device));
  EngineConfig engine{.vocab_size = config.vocab_size,
                      .max_model_len = plan.max_model_len,
                      .eos_token_ids = config.eos_token_ids,
                      .enforce_eager = true};
  if (ranks > 1) engine.communicator = communicators[0].get();
  for (int r = 1; r < ranks; ++r) {
    engine.other_ranks.push_back({.model = models[r].get(),
                                  .cache = &caches[r],
                                  .communicator = communicators[r].get(),
                                  .drafter = drafters.empty() ? nullptr : drafters[r].get()});
  }
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name +
                     "/reference.json");
  const std::vector<GenerationRequest> requests =
      greedy_requests(nlohmann::json::parse(file)["prompts"]);
  GpuRun out;
  out.run = collect_run(generate(*models[0], plan, caches[0], engine, requests, &out.stats,
                                 drafters.empty() ? nullptr : drafters[0].get()));
  return out;
}

struct Case {
  const char* fixture;
  Split split;
  const char* drafter = "";
};

std::string case_name(const Case& c) {
  std::string name = c.fixture;
  if (*c.drafter) name += std::string("_") + c.drafter;
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  if (c.split.tp > 1) name += "_tp" + std::to_string(c.split.tp);
  if (c.split.dcp > 1) name += "_dcp" + std::to_string(c.split.dcp);
  if (c.split.interleave > 1) name += "_interleave" + std::to_string(c.split.interleave);
  return name;
}

void PrintTo(const Case& c, std::ostream* out) {
  *out << case_name(c);
}

class CudaParallelTest : public ::testing::TestWithParam<Case> {};

// `many` (c's split) against `one` (one GPU): prompt log-probabilities within bf16 rounding, and
// greedy tokens that part only at a near-tie (MoE excepted).
void expect_matches(const Case& c, const GpuRun& one, const GpuRun& many,
                    const std::string& label) {
  const Difference d = compare(many.run.prompt_logprobs, one.run.prompt_logprobs);
  EXPECT_LE(d.mean, kMean);
  EXPECT_LE(d.worst, kWorst);
  // Greedy tokens part from one GPU's only at a near-tie in the ranks' own log-probabilities.
  const bool moe =
      load_model_config(checkpoint_dir(c.fixture)).architecture == "MiMoV2FlashForCausalLM";
  const double same = check_greedy(many.run.tokens, ids_of(one.run.tokens), moe);
  if (*c.drafter) {
    EXPECT_GT(many.stats.spec_rounds, 0);
    if (std::string(c.fixture) == c.drafter) {
      // A model drafting for itself: every draft is kept, on every rank layout.
      EXPECT_EQ(many.stats.spec_accepted_tokens, many.stats.spec_draft_tokens);
    }
  }
  std::printf(
      "[ cuda     ] %s: prompt logprobs vs one GPU mean %.2e worst %.2e; greedy tokens before a "
      "near-tie split %.2f\n",
      label.c_str(), d.mean, d.worst, same);
}

TEST_P(CudaParallelTest, MatchesOneGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  expect_matches(c, run_ranks(c.fixture, {}, c.drafter), run_ranks(c.fixture, c.split, c.drafter),
                 case_name(c));
}

const Case kCases[] = {Case{"llama-tiny", {.tp = 2}},
                       Case{"llama-tiny", {.dcp = 2}},
                       Case{"llama-tiny", {.tp = 2, .dcp = 2, .interleave = 2}},
                       Case{"qwen3-tiny", {.tp = 2}},
                       Case{"gemma4-tiny", {.dcp = 2}},
                       Case{"gemma4-tiny", {.tp = 2, .dcp = 2}},
                       Case{"mimo-tiny", {.tp = 2}},
                       Case{"kjv-gemma4", {.dcp = 2}},
                       Case{"llama-tiny", {.tp = 2, .dcp = 2}, "llama-tiny"},
                       Case{"gemma4-tiny", {.dcp = 2}, "gemma4-assistant-tiny"}};

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParallelTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return case_name(info.param); });

// The fixture's reference prompts, greedy, through Llm::load on GPUs 0 to ranks - 1 (NCCL between
// them), eagerly or with CUDA graphs.
GpuRun run_llm(const std::string& name, const Split& split, const std::string& drafter,
               bool eager) {
  EngineOptions options;
  options.paths.model_dir = checkpoint_dir(name);
  options.device = "cuda";
  options.enforce_eager = eager;
  options.tensor_parallel_size = split.tp;
  options.decode_context_parallel_size = split.dcp;
  options.dcp_kv_cache_interleave_size = split.interleave;
  options.cache.dtype = "bfloat16";
  options.cache.block_size = 4;
  options.cache.max_model_len = 256;
  options.cache.num_blocks = 300;
  if (!drafter.empty()) {
    options.speculative_config =
        fmt::format(R"({{"model": "{}", "num_speculative_tokens": 3}})", checkpoint_dir(drafter));
  }
  const std::unique_ptr<Llm> llm = Llm::load(options);
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name +
                     "/reference.json");
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (GenerationRequest& request : greedy_requests(nlohmann::json::parse(file)["prompts"])) {
    prompts.push_back(Prompt::of_ids(std::move(request.prompt_token_ids)));
    params.push_back(request.params);
  }
  GpuRun out;
  for (const RequestOutput& result : llm->generate_each(prompts, params)) {
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    std::vector<SampledToken>& tokens = out.run.tokens.emplace_back();
    for (size_t i = 0; i < result.token_ids.size() && i < result.logprobs.size(); ++i)
      tokens.push_back({result.token_ids[i], result.logprobs[i].logprob, result.logprobs[i].top});
    std::vector<double>& logprobs = out.run.prompt_logprobs.emplace_back();
    for (size_t i = 1; i < result.prompt_logprobs.size(); ++i)
      logprobs.push_back(result.prompt_logprobs[i]->logprob);
  }
  out.stats = llm->stats().totals;
  return out;
}

class CudaNcclParallelTest : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(CudaNcclParallelTest, MatchesOneGpu) {
  const auto& [c, eager] = GetParam();
  const int64_t ranks = world_size(c.split.tp, c.split.dcp);
  if (!nccl_available_in_build() || cuda_device_count() < ranks) {
    GTEST_SKIP() << "needs NCCL and " << ranks << " GPUs";
  }
  expect_matches(c, run_llm(c.fixture, {}, c.drafter, eager),
                 run_llm(c.fixture, c.split, c.drafter, eager),
                 case_name(c) + (eager ? " over NCCL, eager" : " over NCCL, graphs"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaNcclParallelTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Bool()),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_eager" : "_graphs");
                         });

}  // namespace
}  // namespace pagoda
