// Speculative decoding on a GPU: each drafter pair of the CPU tests, in bf16, with CUDA graphs
// (verify steps captured per (batch, 1 + K)) and eagerly, with drafts judged on the device and
// (with log-probabilities asked for) on the host. Greedy output must be the run without a
// drafter's, token for token, up to a near-tie in that run's own log-probabilities, where bf16
// rounding of a differently shaped step may pick the other token (MoE routing may flip anywhere).
// Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "engine/engine.h"
#include "engine/proposer.h"
#include "engine/speculative_config.h"
#include "model/fixtures.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

constexpr double kNearTie = 0.1;
constexpr int64_t kDrafts = 3;

struct Pair {
  const char* target;
  const char* drafter;
  const char* label;
  bool moe = false;
};

struct GpuPair {
  ModelConfig config;
  std::unique_ptr<CausalLm> model;
  std::unique_ptr<Drafter> drafter;
  KvCachePlan plan;
  KvCache cache;
  nlohmann::json reference;
};

// `dtype`: the target's KV pages; `draft_dtype`: the draft model's, where they differ.
std::unique_ptr<GpuPair> load_gpu_pair(const Pair& pair, DType dtype = DType::kBF16,
                                       std::optional<DType> draft_dtype = {}) {
  const Device device = Device::cuda(0);
  auto out = std::make_unique<GpuPair>();
  out->config = load_model_config(checkpoint_dir(pair.target));
  WeightSource weights = WeightSource::from_checkpoint(checkpoint_dir(pair.target));
  weights.set_device(device);
  out->model = build_causal_lm(out->config, weights);
  const SpeculativeConfig spec =
      parse_speculative_config(fmt::format(R"({{"model": "{}", "num_speculative_tokens": {}}})",
                                           checkpoint_dir(pair.drafter), kDrafts),
                               checkpoint_dir(pair.target), out->config);
  out->drafter = std::make_unique<Drafter>(load_drafter(spec, device));
  const CacheConfig cache_config = resolve_cache_config({.dtype = dtype,
                                                         .draft_dtype = draft_dtype,
                                                         .block_size = 16,
                                                         .max_model_len = 256,
                                                         .num_blocks = 200},
                                                        out->config, device);
  out->plan = plan_cache(out->config, &spec.drafter, cache_config);
  out->cache = allocate_kv_cache(out->plan, device);
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + pair.target +
                     "/reference.json");
  out->reference = nlohmann::json::parse(file);
  return out;
}

// The greedy tokens `spec` shares with `plain` (run with top log-probabilities), each prompt's up
// to its first difference, which must be a near-tie in plain's own log-probabilities (anywhere
// where `moe`: routing may flip).
int64_t same_tokens(const std::vector<Request>& plain, const std::vector<Request>& spec, bool moe) {
  int64_t same = 0;
  for (size_t p = 0; p < plain.size(); ++p) {
    const std::vector<SampledToken> want = plain[p].output_tokens();
    const std::vector<SampledToken> got = spec[p].output_tokens();
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
      if (got[i].token_id == want[i].token_id) {
        ++same;
        continue;
      }
      const auto& top = want[i].top;
      const auto other = std::find_if(top.begin(), top.end(), [&](const TokenLogprob& t) {
        return t.token_id == got[i].token_id;
      });
      EXPECT_TRUE(moe || (other != top.end() && want[i].logprob - other->logprob <= kNearTie))
          << "prompt " << p << " token " << i << ": " << got[i].token_id << " for "
          << want[i].token_id;
      break;  // past a split the sequences differ
    }
  }
  return same;
}

class CudaSpeculativeTest : public ::testing::TestWithParam<Pair> {};

TEST_P(CudaSpeculativeTest, GreedyOutputIsTheRunWithoutDrafts) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Pair& param = GetParam();
  const std::unique_ptr<GpuPair> pair = load_gpu_pair(param);
  auto requests = [&](int64_t logprobs) {
    std::vector<GenerationRequest> out;
    for (const nlohmann::json& prompt : pair->reference["prompts"]) {
      out.push_back(
          {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
           .params = {
               .temperature = 0.0, .max_tokens = 24, .ignore_eos = true, .logprobs = logprobs}});
    }
    return out;
  };
  auto run = [&](bool eager, bool speculate, int64_t logprobs, GenerationStats* stats) {
    const EngineConfig engine{.vocab_size = pair->config.vocab_size,
                              .max_model_len = pair->plan.max_model_len,
                              .eos_token_ids = pair->config.eos_token_ids,
                              .enforce_eager = eager};
    return generate(*pair->model, pair->plan, pair->cache, engine, requests(logprobs), stats,
                    speculate ? pair->drafter.get() : nullptr);
  };
  std::map<std::pair<bool, int64_t>, int64_t> kept;  // by (eager, logprobs)
  for (const bool eager : {false, true}) {
    // The run without drafts, with its top log-probabilities to tell near-ties.
    const std::vector<Request> plain = run(eager, false, 5, nullptr);
    // Drafts judged on the device (no log-probabilities asked) and on the host.
    for (const int64_t logprobs : {0, 5}) {
      SCOPED_TRACE(fmt::format("{}, drafts judged on the {}", eager ? "eager" : "graphs",
                               logprobs == 0 ? "device" : "host"));
      GenerationStats stats;
      const std::vector<Request> spec = run(eager, true, logprobs, &stats);
      const int64_t same = same_tokens(plain, spec, param.moe);
      const int64_t total = static_cast<int64_t>(plain.size()) * 24;
      EXPECT_GE(same, param.moe ? total / 4 : total / 2) << same << " of " << total;
      EXPECT_GT(stats.spec_rounds, 0);
      EXPECT_GT(stats.spec_draft_tokens, 0);
      kept[{eager, logprobs}] = stats.spec_accepted_tokens;
      std::printf(
          "[ cuda spec ] %s %s %s: %lld of %lld tokens as without drafts; %lld of %lld "
          "drafts kept\n",
          param.label, eager ? "eager" : "graphs", logprobs == 0 ? "device" : "host",
          static_cast<long long>(same), static_cast<long long>(total),
          static_cast<long long>(stats.spec_accepted_tokens),
          static_cast<long long>(stats.spec_draft_tokens));
    }
  }
  // Drafting in graphs (the assistant's K steps, argmaxes fed back on the device) proposes what
  // eager drafting does, up to bf16 rounding of differently padded batches.
  const int64_t in_graphs = kept[std::pair{false, int64_t{0}}];
  const int64_t eagerly = kept[std::pair{true, int64_t{0}}];
  EXPECT_GE(in_graphs * 10, eagerly * 9);
  EXPECT_GE(eagerly * 10, in_graphs * 9);
}

// Sampling requests with drafts judged on the device (the lossless rule in the sampling kernel)
// and on the host (log-probabilities asked for) take the same draws, so they produce the same
// tokens, up to a draw that lands within rounding of a boundary, after which one sequence differs.
TEST_P(CudaSpeculativeTest, SamplingDraftsJudgedOnTheDeviceAsOnTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Pair& param = GetParam();
  const std::unique_ptr<GpuPair> pair = load_gpu_pair(param);
  auto run = [&](int64_t logprobs, GenerationStats* stats) {
    std::vector<GenerationRequest> requests;
    for (const nlohmann::json& prompt : pair->reference["prompts"]) {
      for (uint64_t seed = 0; seed < 4; ++seed) {
        requests.push_back(
            {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
             .params = {.temperature = 0.8,
                        .top_k = 50,
                        .top_p = 0.95,
                        .seed = seed,
                        .max_tokens = 24,
                        .ignore_eos = true,
                        .logprobs = logprobs}});
      }
    }
    const EngineConfig engine{.vocab_size = pair->config.vocab_size,
                              .max_model_len = pair->plan.max_model_len,
                              .eos_token_ids = pair->config.eos_token_ids};
    return generate(*pair->model, pair->plan, pair->cache, engine, requests, stats,
                    pair->drafter.get());
  };
  GenerationStats device_stats, host_stats;
  const std::vector<Request> device = run(0, &device_stats);
  const std::vector<Request> host = run(1, &host_stats);
  ASSERT_EQ(device.size(), host.size());
  int64_t same = 0;
  for (size_t r = 0; r < device.size(); ++r)
    same += device[r].token_ids == host[r].token_ids;
  const auto total = static_cast<int64_t>(device.size());
  EXPECT_GE(same * 10, total * 9) << same << " of " << total << " requests the same";
  // Both branches of the rule ran: some drafts kept, and some not, unless the drafter is the
  // target (p = q keeps every draft).
  EXPECT_GT(device_stats.spec_accepted_tokens, 0);
  if (std::string_view(param.target) == param.drafter) {
    EXPECT_EQ(device_stats.spec_accepted_tokens, device_stats.spec_draft_tokens);
  } else {
    EXPECT_LT(device_stats.spec_accepted_tokens, device_stats.spec_draft_tokens);
  }
  std::printf(
      "[ cuda spec ] %s sampling: %lld of %lld requests as judged on the host; %lld of "
      "%lld drafts kept on the device, %lld on the host\n",
      param.label, static_cast<long long>(same), static_cast<long long>(total),
      static_cast<long long>(device_stats.spec_accepted_tokens),
      static_cast<long long>(device_stats.spec_draft_tokens),
      static_cast<long long>(host_stats.spec_accepted_tokens));
}

// One pool holding e4m3 pages for the target beside bf16 pages for its draft model (itself, so
// most drafts are kept): the greedy tokens are the target's alone in an e4m3 pool of its own, up to
// near-ties (verify steps are shaped otherwise than decode steps).
TEST(CudaSpeculativeMixedPoolTest, Fp8TargetPagesBesideBf16DrafterPages) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Pair param{"llama-tiny", "llama-tiny", "llama_self"};
  const std::unique_ptr<GpuPair> pair = load_gpu_pair(param, DType::kF8E4M3, DType::kBF16);
  std::set<DType> dtypes;
  for (const KvGroup& group : pair->plan.groups)
    dtypes.insert(group.spec.page.dtype);
  EXPECT_EQ(dtypes, (std::set<DType>{DType::kF8E4M3, DType::kBF16}));
  const CacheConfig own = resolve_cache_config(
      {.dtype = DType::kF8E4M3, .block_size = 16, .max_model_len = 256, .num_blocks = 200},
      pair->config, Device::cuda(0));
  const KvCachePlan alone_plan = plan_cache(pair->config, nullptr, own);
  KvCache alone_cache = allocate_kv_cache(alone_plan, Device::cuda(0));
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : pair->reference["prompts"]) {
    requests.push_back(
        {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
         .params = {.temperature = 0.0, .max_tokens = 24, .ignore_eos = true, .logprobs = 5}});
  }
  const EngineConfig engine{.vocab_size = pair->config.vocab_size,
                            .max_model_len = pair->plan.max_model_len,
                            .eos_token_ids = pair->config.eos_token_ids};
  const std::vector<Request> plain =
      generate(*pair->model, alone_plan, alone_cache, engine, requests, nullptr, nullptr);
  GenerationStats stats;
  const std::vector<Request> spec = generate(*pair->model, pair->plan, pair->cache, engine,
                                             requests, &stats, pair->drafter.get());
  const int64_t same = same_tokens(plain, spec, false);
  const int64_t total = static_cast<int64_t>(requests.size()) * 24;
  EXPECT_GE(same, total / 2) << same << " of " << total;
  EXPECT_GT(stats.spec_accepted_tokens, stats.spec_draft_tokens / 2);
  std::printf(
      "[ cuda spec ] e4m3 target beside bf16 drafter: %lld of %lld tokens as alone; %lld "
      "of %lld drafts kept\n",
      static_cast<long long>(same), static_cast<long long>(total),
      static_cast<long long>(stats.spec_accepted_tokens),
      static_cast<long long>(stats.spec_draft_tokens));
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, CudaSpeculativeTest,
    ::testing::Values(Pair{"kjv-gemma4", "kjv-gemma4-assistant", "kjv_mtp"},
                      Pair{"gemma4-tiny", "gemma4-assistant-tiny", "gemma4_mtp"},
                      Pair{"mimo-tiny", "qwen3-tiny", "mimo_qwen3_padded", true},
                      Pair{"llama-tiny", "llama3-rope-tiny", "llama_llama"},
                      Pair{"llama-tiny", "llama-tiny", "llama_self"}),
    [](const ::testing::TestParamInfo<Pair>& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace pagoda
