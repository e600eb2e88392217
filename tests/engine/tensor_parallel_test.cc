// Tensor and decode context parallelism on in-process CPU ranks: every rank loads its shard of a
// fixture's checkpoint (its heads, its rows and columns of the projections), plans and holds its
// own KV cache (under DCP, its share of every sequence's tokens), and runs each step with the
// engine's inputs; the output must be the one-rank run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "engine/proposer.h"
#include "engine/speculative_config.h"
#include "model/fixtures.h"
#include "model/tensor_parallel.h"
#include "parallel/cpu_communicator.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

struct Ranks {
  ModelConfig config;
  std::vector<std::unique_ptr<Communicator>> communicators;
  std::vector<std::unique_ptr<Communicator>> context_communicators;  // with DCP groups
  std::vector<std::unique_ptr<CausalLm>> models;
  std::vector<std::unique_ptr<Drafter>> drafters;  // with a drafter, each rank's shard
  KvCachePlan plan;                                // every rank's
  std::vector<KvCache> caches;
  nlohmann::json reference;
};

// How a run is split: TP and DCP sizes, and the tokens dealt to a DCP rank at a time.
struct Split {
  int tp = 1;
  int dcp = 1;
  int interleave = 1;
};

// A fixture's ranks, and with `drafter` (a fixture's name) each rank's shard of it drafting 3
// tokens.
std::unique_ptr<Ranks> load_ranks(const std::string& name, const Split& split,
                                  int64_t num_blocks = 300, int64_t max_model_len = 256,
                                  const std::string& drafter = "") {
  auto out = std::make_unique<Ranks>();
  out->config = load_model_config(checkpoint_dir(name));
  const int ranks = static_cast<int>(world_size(split.tp, split.dcp));
  if (ranks > 1) out->communicators = make_cpu_group(ranks);
  if (has_context_groups(split.tp, split.dcp)) {
    for (int first = 0; first < ranks; first += split.dcp) {
      for (std::unique_ptr<Communicator>& comm : make_cpu_group(split.dcp))
        out->context_communicators.push_back(std::move(comm));
    }
  }
  const auto context = [&](size_t r) {
    return out->context_communicators.empty() ? nullptr : out->context_communicators[r].get();
  };
  const auto place = [&](int r) {
    return rank_place(split.tp, split.dcp, r, ranks > 1 ? out->communicators[r].get() : nullptr,
                      context(r));
  };
  std::optional<ModelConfig> drafter_config;
  if (!drafter.empty()) {
    const SpeculativeConfig spec = parse_speculative_config(
        fmt::format(R"({{"model": "{}", "num_speculative_tokens": 3}})", checkpoint_dir(drafter)),
        checkpoint_dir(name), out->config);
    for (int r = 0; r < ranks; ++r)
      out->drafters.push_back(
          std::make_unique<Drafter>(load_drafter(spec, Device::cpu(), std::nullopt, 0, place(r))));
    drafter_config = rank_model_config(spec.drafter, split.tp, split.dcp);
  }
  // Every tensor is read by some rank (MoE experts by one rank each).
  std::set<std::string> unread_by_all;
  for (int r = 0; r < ranks; ++r) {
    WeightSource weights = WeightSource::from_checkpoint(checkpoint_dir(name));
    out->models.push_back(build_causal_lm(out->config, weights, place(r)));
    std::set<std::string> unread;
    for (const std::string& tensor : weights.unused())
      if (r == 0 || unread_by_all.contains(tensor)) unread.insert(tensor);
    unread_by_all = std::move(unread);
  }
  EXPECT_TRUE(unread_by_all.empty()) << *unread_by_all.begin();
  out->plan = plan_on_cpu(rank_model_config(out->config, split.tp, split.dcp),
                          drafter_config ? &*drafter_config : nullptr,
                          {.dtype = DType::kF32,
                           .block_size = 4,
                           .max_model_len = max_model_len,
                           .num_blocks = num_blocks,
                           .context_parallel_size = split.dcp,
                           .context_interleave = split.interleave});
  for (int r = 0; r < ranks; ++r)
    out->caches.push_back(allocate_kv_cache(out->plan, Device::cpu()));
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name +
                     "/reference.json");
  out->reference = nlohmann::json::parse(file);
  return out;
}

std::vector<GenerationRequest> reference_requests(const Ranks& ranks) {
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : ranks.reference["prompts"])
    requests.push_back(request_for(prompt));
  return requests;
}

std::vector<Request> run(Ranks& ranks, const std::vector<GenerationRequest>& requests,
                         const SchedulerConfig& scheduler = {}, GenerationStats* stats = nullptr) {
  EngineConfig config{.vocab_size = ranks.config.vocab_size,
                      .max_model_len = ranks.plan.max_model_len,
                      .eos_token_ids = ranks.config.eos_token_ids,
                      .scheduler = scheduler};
  const auto context = [&](size_t r) {
    return ranks.context_communicators.empty() ? nullptr : ranks.context_communicators[r].get();
  };
  if (!ranks.communicators.empty()) config.communicator = ranks.communicators[0].get();
  config.context_communicator = context(0);
  for (size_t r = 1; r < ranks.models.size(); ++r) {
    config.other_ranks.push_back(
        {.model = ranks.models[r].get(),
         .cache = &ranks.caches[r],
         .communicator = ranks.communicators[r].get(),
         .context_communicator = context(r),
         .drafter = ranks.drafters.empty() ? nullptr : ranks.drafters[r].get()});
  }
  return generate(*ranks.models[0], ranks.plan, ranks.caches[0], config, requests, stats,
                  ranks.drafters.empty() ? nullptr : ranks.drafters[0].get());
}

// The largest difference between two runs' prompt and output log-probabilities; their tokens
// must be the same.
double compare_runs(const std::vector<Request>& got, const std::vector<Request>& expected) {
  EXPECT_EQ(got.size(), expected.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    EXPECT_EQ(got[i].token_ids, expected[i].token_ids) << "prompt " << i;
    EXPECT_EQ(got[i].prompt_logprobs.size(), expected[i].prompt_logprobs.size());
    for (size_t p = 1;
         p < std::min(got[i].prompt_logprobs.size(), expected[i].prompt_logprobs.size()); ++p) {
      worst = std::max(worst, std::abs(static_cast<double>(got[i].prompt_logprobs[p]->logprob) -
                                       expected[i].prompt_logprobs[p]->logprob));
    }
    EXPECT_EQ(got[i].output_logprobs.size(), expected[i].output_logprobs.size());
    for (size_t t = 0;
         t < std::min(got[i].output_logprobs.size(), expected[i].output_logprobs.size()); ++t) {
      worst = std::max(worst, std::abs(static_cast<double>(got[i].output_logprobs[t].logprob) -
                                       expected[i].output_logprobs[t].logprob));
    }
  }
  return worst;
}

// A parameterized case's name: the fixtures, then the sizes above 1.
std::string test_name(std::initializer_list<const char*> fixtures, const Split& split) {
  std::string name;
  for (const char* fixture : fixtures)
    name += (name.empty() ? "" : "_") + std::string(fixture);
  std::replace(name.begin(), name.end(), '-', '_');
  if (split.tp > 1) name += "_tp" + std::to_string(split.tp);
  if (split.dcp > 1) name += "_dcp" + std::to_string(split.dcp);
  if (split.interleave > 1) name += "_interleave" + std::to_string(split.interleave);
  return name;
}

struct Case {
  const char* fixture;
  Split split;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << test_name({c.fixture}, c.split);
}

class ParallelTest : public ::testing::TestWithParam<Case> {};

// The same greedy tokens, and prompt and output log-probabilities within f32 rounding of sums
// taken in another order, as one rank.
// - TP: at 4 ranks llama-tiny's 2 KV heads and at 2 and 4 ranks qwen3-tiny's and gemma4-tiny's
//   one are replicated.
// - DCP: every rank holds every KV head and its share of each sequence's tokens, one or two at a
//   time; the shares' outputs merge by their log-sum-exps, and mimo-tiny's sinks count once.
// - gemma4-tiny's later layers read earlier layers' caches (KV sharing, under DCP their sources'
//   shares), its full layers have K = V, its per-layer inputs stay whole; its sliding layers (and
//   mimo-tiny's, kjv-gemma4's) see windows that start inside another rank's share.
// - TP 4 x DCP 2: two DCP groups of two consecutive ranks, each with its own communicator and
//   its own share of the KV heads, gathering its q heads within the group.
// - MoE (gemma4-noshare-tiny's 4 experts beside a dense MLP, mimo-tiny's 8 sigmoid-routed ones
//   beside dense layers): each rank runs its experts, whole, on the tokens routed to them.
TEST_P(ParallelTest, MatchesOneRank) {
  const Case& c = GetParam();
  auto one = load_ranks(c.fixture, {});
  auto many = load_ranks(c.fixture, c.split);
  // Each rank's KV cache holds its share of the KV heads: all of them under DCP.
  const HeadShard shard =
      shard_heads(one->config.layers[0], {.size = c.split.tp, .dcp = {.size = c.split.dcp}});
  EXPECT_EQ(many->plan.layers[0].attention.num_kv_heads, shard.kv_count);
  if (c.split.dcp == c.split.tp) {
    EXPECT_EQ(shard.kv_count, one->config.layers[0].num_kv_heads);
  }
  const std::vector<GenerationRequest> requests = reference_requests(*one);
  const std::vector<Request> expected = run(*one, requests);
  // Small chunks and a small pool too, so steps mix prefill and decode.
  for (const SchedulerConfig& scheduler :
       {SchedulerConfig{}, SchedulerConfig{.max_num_seqs = 2, .max_num_batched_tokens = 7}}) {
    EXPECT_LT(compare_runs(run(*many, requests, scheduler), expected), 1e-4) << c.fixture;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, ParallelTest,
    ::testing::Values(
        Case{"llama-tiny", {.tp = 2}}, Case{"llama-tiny", {.tp = 4}}, Case{"qwen3-tiny", {.tp = 2}},
        Case{"qwen3-tiny", {.tp = 4}}, Case{"gemma4-tiny", {.tp = 2}},
        Case{"gemma4-tiny", {.tp = 4}}, Case{"llama-tiny", {.dcp = 2}},
        Case{"qwen3-tiny", {.dcp = 2}}, Case{"gemma4-tiny", {.dcp = 2}},
        Case{"gemma4-noshare-tiny", {.dcp = 2}}, Case{"mimo-tiny", {.dcp = 2}},
        Case{"kjv-gemma4", {.dcp = 2, .interleave = 2}},
        Case{"llama-tiny", {.dcp = 4, .interleave = 2}}, Case{"llama-tiny", {.tp = 2, .dcp = 2}},
        Case{"qwen3-tiny", {.tp = 2, .dcp = 2}}, Case{"gemma4-tiny", {.tp = 2, .dcp = 2}},
        Case{"gemma4-tiny", {.tp = 4, .dcp = 4}}, Case{"gemma4-noshare-tiny", {.tp = 2}},
        Case{"mimo-tiny", {.tp = 2}}, Case{"mimo-tiny", {.tp = 4}},
        Case{"mimo-tiny", {.tp = 2, .dcp = 2}}, Case{"llama-tiny", {.tp = 4, .dcp = 2}},
        Case{"qwen3-tiny", {.tp = 4, .dcp = 2, .interleave = 2}},
        Case{"gemma4-tiny", {.tp = 4, .dcp = 2}}, Case{"gemma4-noshare-tiny", {.tp = 2, .dcp = 2}},
        Case{"kjv-gemma4", {.tp = 2}}, Case{"kjv-gemma4", {.tp = 4}},
        Case{"kjv-gemma4", {.tp = 2, .dcp = 2}}, Case{"llama-fp8-tiny", {.tp = 2}},
        Case{"llama-fp8-tiny", {.tp = 2, .dcp = 2}}, Case{"mimo-fp8-tiny", {.tp = 2}}),
    [](const auto& info) { return test_name({info.param.fixture}, info.param.split); });

struct SpecCase {
  const char* target;
  const char* drafter;
  Split split;
};

void PrintTo(const SpecCase& c, std::ostream* out) {
  *out << test_name({c.target, c.drafter}, c.split);
}

class SpeculativeParallelTest : public ::testing::TestWithParam<SpecCase> {};

// Each rank drafts with its shard of the drafter: a draft model's own KV layers (llama-tiny
// drafting for itself; qwen3-tiny's pages padded to mimo-tiny's) split and dealt as the target's
// are, and the Gemma 4 assistant reads its rank's share of the target's caches. Every drafting
// forward runs on all ranks at once. The run gives the one-rank speculative run's tokens, drafts
// and acceptances, and log-probabilities within 1e-4.
TEST_P(SpeculativeParallelTest, DraftsAndKeepsWhatOneRankDoes) {
  const SpecCase& c = GetParam();
  auto one = load_ranks(c.target, {}, 300, 256, c.drafter);
  auto many = load_ranks(c.target, c.split, 300, 256, c.drafter);
  const std::vector<GenerationRequest> requests = reference_requests(*one);
  GenerationStats one_stats;
  GenerationStats many_stats;
  const std::vector<Request> expected = run(*one, requests, {}, &one_stats);
  EXPECT_LT(compare_runs(run(*many, requests, {}, &many_stats), expected), 1e-4);
  EXPECT_GT(one_stats.spec_rounds, 0);
  EXPECT_EQ(many_stats.spec_rounds, one_stats.spec_rounds);
  EXPECT_EQ(many_stats.spec_draft_tokens, one_stats.spec_draft_tokens);
  EXPECT_EQ(many_stats.spec_accepted_tokens, one_stats.spec_accepted_tokens);
  EXPECT_EQ(many_stats.spec_accepted_per_position, one_stats.spec_accepted_per_position);
  if (std::string(c.target) == c.drafter) {
    EXPECT_EQ(many_stats.spec_accepted_tokens, many_stats.spec_draft_tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, SpeculativeParallelTest,
    ::testing::Values(SpecCase{"llama-tiny", "llama-tiny", {.tp = 2}},
                      SpecCase{"llama-tiny", "llama-tiny", {.dcp = 2}},
                      SpecCase{"llama-tiny", "llama-tiny", {.tp = 2, .dcp = 2}},
                      SpecCase{"mimo-tiny", "qwen3-tiny", {.tp = 2}},
                      SpecCase{"gemma4-tiny", "gemma4-assistant-tiny", {.tp = 2}},
                      SpecCase{"gemma4-tiny", "gemma4-assistant-tiny", {.tp = 2, .dcp = 2}},
                      SpecCase{"llama-tiny", "llama-tiny", {.tp = 4, .dcp = 2}},
                      SpecCase{"gemma4-tiny", "gemma4-assistant-tiny", {.tp = 4, .dcp = 2}},
                      SpecCase{"kjv-gemma4", "kjv-gemma4-assistant", {.dcp = 2, .interleave = 2}}),
    [](const auto& info) {
      return test_name({info.param.target, info.param.drafter}, info.param.split);
    });

// Under DCP a block id covers block_size tokens on each rank, so a pool of as many blocks holds
// twice the tokens; a batch that outgrows it is preempted and recomputed, and gives the tokens
// each request gives alone.
TEST(ContextParallelTest, BatchUnderKvPressureGivesTheSoloTokens) {
  auto ranks = load_ranks("llama-tiny", {.dcp = 2}, 16, 64);
  EXPECT_EQ(ranks->plan.groups[0].spec.block_tokens(), 8);
  std::vector<GenerationRequest> requests = reference_requests(*ranks);
  for (GenerationRequest& request : requests)
    request.params.max_tokens = 24;
  std::vector<std::vector<int32_t>> solo;
  for (const GenerationRequest& request : requests)
    solo.push_back(token_ids(run(*ranks, {request}).front()));
  GenerationStats stats;
  const std::vector<Request> batch = run(*ranks, requests, {}, &stats);
  EXPECT_GT(stats.preemptions, 0);
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(token_ids(batch[i]), solo[i]) << "prompt " << i;
}

// Models that do not split are refused before any weight loads, naming the reason.
TEST(TensorParallelConfigTest, RefusesWhatDoesNotSplit) {
  const auto refused = [](const ModelConfig& config, int64_t size) {
    try {
      check_tensor_parallel(config, size);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  const auto message = [&](const std::string& fixture, int64_t size) {
    return refused(load_model_config(checkpoint_dir(fixture)), size);
  };
  EXPECT_EQ(message("llama-tiny", 1), "");
  EXPECT_EQ(message("llama-tiny", 2), "");
  EXPECT_NE(message("llama-tiny", 3).find("4 attention heads, which do not split over 3 ranks"),
            std::string::npos)
      << message("llama-tiny", 3);
  EXPECT_NE(message("llama-tiny", 8).find("do not split over 8 ranks"), std::string::npos);
  EXPECT_EQ(message("gemma4-noshare-tiny", 2), "");
  EXPECT_EQ(message("mimo-tiny", 4), "");
  // Experts split whole: a count the ranks do not divide is refused.
  ModelConfig three_experts = load_model_config(checkpoint_dir("gemma4-noshare-tiny"));
  three_experts.text_config["num_experts"] = 3;
  EXPECT_NE(refused(three_experts, 2).find("num_experts 3 does not split over 2 ranks"),
            std::string::npos)
      << refused(three_experts, 2);
  ModelConfig six_experts = load_model_config(checkpoint_dir("mimo-tiny"));
  six_experts.text_config["n_routed_experts"] = 6;
  EXPECT_NE(refused(six_experts, 4).find("n_routed_experts 6 does not split over 4 ranks"),
            std::string::npos)
      << refused(six_experts, 4);
  EXPECT_NE(message("llama-tiny", 0).find("--tensor-parallel-size 0"), std::string::npos);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// What DCP does not combine with is refused before any weight loads, and an interleave that does
// not divide the block size when the KV cache is planned.
TEST(ContextParallelConfigTest, RefusesWhatDoesNotCombine) {
  const auto message = [](auto&& body) {
    try {
      body();
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([] { check_context_parallel(1, 2, 1); }), "");
  EXPECT_EQ(message([] { check_context_parallel(4, 4, 3); }), "");
  EXPECT_EQ(message([] { check_context_parallel(4, 2, 1); }), "");
  EXPECT_NE(
      message([] { check_context_parallel(4, 3, 1); }).find("the DCP size must divide the TP size"),
      std::string::npos);
  EXPECT_NE(message([] {
              check_context_parallel(1, 0, 1);
            }).find("--decode-context-parallel-size 0: it must be 1 to 256"),
            std::string::npos);
  EXPECT_NE(
      message([] { check_context_parallel(1, 2, 0); }).find("--dcp-kv-cache-interleave-size 0"),
      std::string::npos);
  const ModelConfig config = load_model_config(checkpoint_dir("gemma4-tiny"));
  const std::string planned = message([&] {
    plan_on_cpu(config, nullptr,
                {.block_size = 4, .context_parallel_size = 2, .context_interleave = 3});
  });
  EXPECT_NE(planned.find("--dcp-kv-cache-interleave-size 3 does not divide the block size"),
            std::string::npos)
      << planned;
  EXPECT_EQ(world_size(1, 2), 2);
  EXPECT_EQ(world_size(4, 4), 4);
  EXPECT_EQ(world_size(2, 1), 2);
}

}  // namespace
}  // namespace pagoda
