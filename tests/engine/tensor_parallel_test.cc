// Tensor parallelism on in-process CPU ranks: every rank loads its shard of a fixture's checkpoint
// (its heads, its rows and columns of the projections), plans and holds its own KV cache, and runs
// each step with the engine's inputs; the output must be the one-rank run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/fixtures.h"
#include "model/tensor_parallel.h"
#include "parallel/cpu_communicator.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

struct Ranks {
  ModelConfig config;
  std::vector<std::unique_ptr<Communicator>> communicators;
  std::vector<std::unique_ptr<CausalLm>> models;
  KvCachePlan plan;  // every rank's
  std::vector<KvCache> caches;
  nlohmann::json reference;
};

std::unique_ptr<Ranks> load_ranks(const std::string& name, int size) {
  auto out = std::make_unique<Ranks>();
  out->config = load_model_config(checkpoint_dir(name));
  if (size > 1) out->communicators = make_cpu_group(size);
  for (int r = 0; r < size; ++r) {
    WeightSource weights = WeightSource::from_checkpoint(checkpoint_dir(name));
    const TensorParallel tp{
        .rank = r, .size = size, .comm = size > 1 ? out->communicators[r].get() : nullptr};
    out->models.push_back(build_causal_lm(out->config, weights, tp));
    EXPECT_TRUE(weights.unused().empty()) << "rank " << r;
  }
  out->plan =
      plan_on_cpu(rank_model_config(out->config, size), nullptr,
                  {.dtype = DType::kF32, .block_size = 4, .max_model_len = 256, .num_blocks = 300});
  for (int r = 0; r < size; ++r)
    out->caches.push_back(allocate_kv_cache(out->plan, Device::cpu()));
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name +
                     "/reference.json");
  out->reference = nlohmann::json::parse(file);
  return out;
}

std::vector<Request> run(Ranks& ranks, const SchedulerConfig& scheduler = {}) {
  EngineConfig config{.vocab_size = ranks.config.vocab_size,
                      .max_model_len = ranks.plan.max_model_len,
                      .eos_token_ids = ranks.config.eos_token_ids,
                      .scheduler = scheduler};
  if (!ranks.communicators.empty()) config.communicator = ranks.communicators[0].get();
  for (size_t r = 1; r < ranks.models.size(); ++r) {
    config.other_ranks.push_back({.model = ranks.models[r].get(),
                                  .cache = &ranks.caches[r],
                                  .communicator = ranks.communicators[r].get()});
  }
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : ranks.reference["prompts"])
    requests.push_back(request_for(prompt));
  return generate(*ranks.models[0], ranks.plan, ranks.caches[0], config, requests);
}

struct Case {
  const char* fixture;
  int size;
};

class TensorParallelTest : public ::testing::TestWithParam<Case> {};

// The same greedy tokens, and prompt and output log-probabilities within f32 rounding of sums
// taken in another order, as one rank; at 4 ranks llama-tiny's 2 KV heads and at 2 and 4 ranks
// qwen3-tiny's and gemma4-tiny's one are replicated. gemma4-tiny's later layers read earlier
// layers' caches (KV sharing), its full layers have K = V, and its per-layer inputs stay whole.
TEST_P(TensorParallelTest, MatchesOneRank) {
  const Case& c = GetParam();
  auto one = load_ranks(c.fixture, 1);
  auto many = load_ranks(c.fixture, c.size);
  // Each rank's KV cache holds its share of the KV heads.
  const HeadShard shard = shard_heads(one->config.layers[0], {.size = c.size});
  EXPECT_EQ(many->plan.layers[0].attention.num_kv_heads, shard.kv_count);
  const std::vector<Request> expected = run(*one);
  // Small chunks and a small pool too, so steps mix prefill and decode.
  for (const SchedulerConfig& scheduler :
       {SchedulerConfig{}, SchedulerConfig{.max_num_seqs = 2, .max_num_batched_tokens = 7}}) {
    const std::vector<Request> got = run(*many, scheduler);
    ASSERT_EQ(got.size(), expected.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << "prompt " << i;
      ASSERT_EQ(got[i].prompt_logprobs.size(), expected[i].prompt_logprobs.size());
      for (size_t p = 1; p < got[i].prompt_logprobs.size(); ++p) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i].prompt_logprobs[p]->logprob) -
                                         expected[i].prompt_logprobs[p]->logprob));
      }
      for (size_t t = 0; t < got[i].output_logprobs.size(); ++t) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i].output_logprobs[t].logprob) -
                                         expected[i].output_logprobs[t].logprob));
      }
    }
    EXPECT_LT(worst, 1e-4) << c.fixture << " on " << c.size << " ranks";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest,
                         ::testing::Values(Case{"llama-tiny", 2}, Case{"llama-tiny", 4},
                                           Case{"qwen3-tiny", 2}, Case{"qwen3-tiny", 4},
                                           Case{"gemma4-tiny", 2}, Case{"gemma4-tiny", 4}),
                         [](const auto& info) {
                           std::string name = info.param.fixture;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + "_" + std::to_string(info.param.size);
                         });

// Models that do not split are refused before any weight loads, naming the reason.
TEST(TensorParallelConfigTest, RefusesWhatDoesNotSplit) {
  const auto message = [](const std::string& fixture, int64_t size) {
    try {
      check_tensor_parallel(load_model_config(checkpoint_dir(fixture)), size);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_EQ(message("llama-tiny", 1), "");
  EXPECT_EQ(message("llama-tiny", 2), "");
  EXPECT_NE(message("llama-tiny", 3).find("4 attention heads, which do not split over 3 ranks"),
            std::string::npos)
      << message("llama-tiny", 3);
  EXPECT_NE(message("llama-tiny", 8).find("do not split over 8 ranks"), std::string::npos);
  EXPECT_NE(message("mimo-tiny", 2).find("does not run tensor-parallel yet"), std::string::npos)
      << message("mimo-tiny", 2);
  EXPECT_NE(message("gemma4-noshare-tiny", 2).find("MoE experts do not split"), std::string::npos)
      << message("gemma4-noshare-tiny", 2);
  EXPECT_NE(message("llama-tiny", 0).find("--tensor-parallel-size 0"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
