// Speculative decoding through the engine, on the committed fixtures: with either kind of drafter,
// greedy output is transformers' greedy output token for token, with the same log-probabilities;
// batching, chunked prefill, prefix caching, preemption, stop tokens, max_tokens, penalties and
// min_tokens all still hold; and sampling keeps the target's distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "engine/engine.h"
#include "engine/proposer.h"
#include "engine/speculative_config.h"
#include "model/fixtures.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

// A target fixture with a drafter planned into its pool.
struct SpecFixture {
  std::unique_ptr<Fixture> target;
  std::unique_ptr<Drafter> drafter;
  ModelConfig drafter_config;

  // A pool of `num_blocks` blocks of 4 tokens (f32) for both models.
  void replan(int64_t num_blocks, int64_t max_model_len = 128) {
    target->plan = plan_on_cpu(target->config, &drafter_config,
                               {.dtype = DType::kF32,
                                .block_size = 4,
                                .max_model_len = max_model_len,
                                .num_blocks = num_blocks});
    target->memory = allocate_kv_cache(target->plan, Device::cpu());
  }

  std::vector<Request> run(const std::vector<GenerationRequest>& requests, bool speculate,
                           const SchedulerConfig& scheduler = {},
                           GenerationStats* stats = nullptr) {
    const EngineConfig config{.vocab_size = target->config.vocab_size,
                              .max_model_len = target->plan.max_model_len,
                              .eos_token_ids = target->config.eos_token_ids,
                              .seed = 5,
                              .scheduler = scheduler};
    return generate(*target->model, target->plan, target->memory, config, requests, stats,
                    speculate ? drafter.get() : nullptr);
  }
};

std::unique_ptr<SpecFixture> load_pair(const std::string& target, const std::string& drafter,
                                       int64_t k) {
  auto pair = std::make_unique<SpecFixture>();
  pair->target = load_fixture(target);
  const SpeculativeConfig config = parse_speculative_config(
      fmt::format(R"({{"model": "{}", "num_speculative_tokens": {}}})", checkpoint_dir(drafter), k),
      checkpoint_dir(target), pair->target->config);
  pair->drafter = std::make_unique<Drafter>(load_drafter(config, Device::cpu()));
  pair->drafter_config = config.drafter;
  pair->replan(400);
  return pair;
}

// The reference prompts, greedy, with log-probabilities of the outputs.
std::vector<GenerationRequest> reference_requests(const Fixture& fixture) {
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : fixture.reference["prompts"]) {
    GenerationRequest request = request_for(prompt);
    request.params.prompt_logprobs.reset();
    request.params.logprobs = 2;
    requests.push_back(request);
  }
  return requests;
}

std::vector<std::vector<int32_t>> reference_tokens(const Fixture& fixture) {
  std::vector<std::vector<int32_t>> expected;
  for (const nlohmann::json& prompt : fixture.reference["prompts"])
    expected.push_back(prompt["greedy_token_ids"].get<std::vector<int32_t>>());
  return expected;
}

struct Pair {
  const char* target;
  const char* drafter;
  const char* label;
};

class SpeculativePairTest : public ::testing::TestWithParam<Pair> {};

// Every token of every reference prompt is transformers' greedy token, and its log-probability
// (and the top two) match the run without a drafter.
TEST_P(SpeculativePairTest, GreedyOutputIsTheTargetsOwn) {
  auto pair = load_pair(GetParam().target, GetParam().drafter, 3);
  const std::vector<GenerationRequest> requests = reference_requests(*pair->target);
  const std::vector<std::vector<int32_t>> expected = reference_tokens(*pair->target);
  GenerationStats stats;
  const std::vector<Request> plain = pair->run(requests, false);
  const std::vector<Request> spec = pair->run(requests, true, {}, &stats);
  for (size_t r = 0; r < requests.size(); ++r) {
    SCOPED_TRACE(fmt::format("prompt {}", r));
    EXPECT_EQ(token_ids(spec[r]), expected[r]);
    EXPECT_EQ(token_ids(plain[r]), expected[r]);
    ASSERT_EQ(spec[r].output_logprobs.size(), plain[r].output_logprobs.size());
    for (size_t t = 0; t < spec[r].output_logprobs.size(); ++t) {
      EXPECT_NEAR(spec[r].output_logprobs[t].logprob, plain[r].output_logprobs[t].logprob, 1e-4);
      ASSERT_EQ(spec[r].output_logprobs[t].top.size(), 2u);
      for (size_t k = 0; k < 2; ++k) {
        EXPECT_EQ(spec[r].output_logprobs[t].top[k].token_id,
                  plain[r].output_logprobs[t].top[k].token_id);
      }
    }
  }
  // Drafts were proposed and judged: at most K = 3 a round (fewer near max_tokens).
  EXPECT_GT(stats.spec_rounds, 0);
  EXPECT_LE(stats.spec_draft_tokens, 3 * stats.spec_rounds);
  EXPECT_GT(stats.spec_draft_tokens, 2 * stats.spec_rounds);
  EXPECT_LE(stats.spec_accepted_tokens, stats.spec_draft_tokens);
  ASSERT_EQ(stats.spec_accepted_per_position.size(), 3u);
  int64_t kept = 0;
  for (size_t j = 0; j < 3; ++j) {
    kept += stats.spec_accepted_per_position[j];
    if (j > 0) {
      EXPECT_LE(stats.spec_accepted_per_position[j], stats.spec_accepted_per_position[j - 1]);
    }
  }
  EXPECT_EQ(kept, stats.spec_accepted_tokens);
  int64_t generated = 0;
  for (const Request& request : spec)
    generated += request.num_output_tokens();
  EXPECT_EQ(stats.generated_tokens, generated);
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, SpeculativePairTest,
    ::testing::Values(
        // The default model with its trained assistant ("mtp": no KV of its own).
        Pair{"kjv-gemma4", "kjv-gemma4-assistant", "kjv_mtp"},
        // Gemma 4 with KV-shared layers; the assistant reads the shared sources.
        Pair{"gemma4-tiny", "gemma4-assistant-tiny", "gemma4_mtp"},
        // MiMo with a Qwen3 draft model whose pages are padded to MiMo's (head sizes 32 vs 24/16).
        Pair{"mimo-tiny", "qwen3-tiny", "mimo_qwen3_padded"},
        // Llama with another Llama as draft model.
        Pair{"llama-tiny", "llama3-rope-tiny", "llama_llama"}),
    [](const ::testing::TestParamInfo<Pair>& info) { return std::string(info.param.label); });

// One pool holding FP8 (e4m3) pages for the target beside bf16 pages for its draft model (itself,
// so most drafts are kept): page sizes unify over bytes, and the greedy tokens and
// log-probabilities are those of the target alone in an FP8 pool of its own.
TEST(SpeculativeEngineTest, Fp8TargetPagesBesideBf16DrafterPages) {
  auto pair = load_pair("llama-tiny", "llama-tiny", 3);
  const CacheConfig mixed{.dtype = DType::kF8E4M3,
                          .draft_dtype = DType::kBF16,
                          .block_size = 4,
                          .max_model_len = 128,
                          .num_blocks = 400};
  pair->target->plan = plan_on_cpu(pair->target->config, &pair->drafter_config, mixed);
  pair->target->memory = allocate_kv_cache(pair->target->plan, Device::cpu());
  std::set<DType> dtypes;
  for (const KvGroup& group : pair->target->plan.groups)
    dtypes.insert(group.spec.page.dtype);
  EXPECT_EQ(dtypes, (std::set<DType>{DType::kF8E4M3, DType::kBF16}));
  const std::vector<GenerationRequest> requests = reference_requests(*pair->target);
  GenerationStats stats;
  const std::vector<Request> spec = pair->run(requests, true, {}, &stats);
  EXPECT_GT(stats.spec_accepted_tokens, stats.spec_draft_tokens / 2);

  auto alone = load_fixture("llama-tiny");
  CacheConfig own = mixed;
  own.draft_dtype.reset();
  alone->plan = plan_on_cpu(alone->config, nullptr, own);
  alone->memory = allocate_kv_cache(alone->plan, Device::cpu());
  const std::vector<Request> plain = testing::run(*alone, requests);
  const std::vector<std::vector<int32_t>> reference = reference_tokens(*pair->target);
  int64_t same_as_f32 = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    SCOPED_TRACE(fmt::format("prompt {}", r));
    EXPECT_EQ(token_ids(spec[r]), token_ids(plain[r]));
    ASSERT_EQ(spec[r].output_logprobs.size(), plain[r].output_logprobs.size());
    for (size_t t = 0; t < spec[r].output_logprobs.size(); ++t)
      EXPECT_NEAR(spec[r].output_logprobs[t].logprob, plain[r].output_logprobs[t].logprob, 1e-4);
    same_as_f32 += token_ids(plain[r]) == reference[r];
  }
  // e4m3 K and V are lossy, but not so lossy that the greedy path leaves transformers' on every
  // prompt.
  EXPECT_GT(same_as_f32, 0);
}

// transformers' own assisted generation (tools/make_fixtures.py --assisted: greedy, a constant 3
// drafts a round) on the pairs it runs: pagoda's speculative decoding with the same drafter gives
// the same tokens.
TEST(SpeculativeEngineTest, MatchesTransformersAssistedGeneration) {
  int64_t pairs = 0;
  for (const auto& [target, drafter] :
       {std::pair{"llama-tiny", "llama3-rope-tiny"}, std::pair{"mimo-tiny", "qwen3-tiny"},
        std::pair{"gemma4-tiny", "gemma4-assistant-tiny"}}) {
    const std::string path =
        std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + target + "/assisted_reference.json";
    if (!std::filesystem::exists(path)) continue;  // a pair transformers does not run
    ++pairs;
    SCOPED_TRACE(target);
    std::ifstream file(path);
    const nlohmann::json reference = nlohmann::json::parse(file);
    ASSERT_EQ(reference["drafter"], drafter);
    auto pair = load_pair(target, drafter, reference["num_assistant_tokens"].get<int64_t>());
    std::vector<GenerationRequest> requests;
    std::vector<std::vector<int32_t>> expected;
    for (const nlohmann::json& prompt : reference["prompts"]) {
      expected.push_back(prompt["assisted_greedy_token_ids"].get<std::vector<int32_t>>());
      requests.push_back(
          {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
           .params = {.temperature = 0.0,
                      .max_tokens = static_cast<int64_t>(expected.back().size()),
                      .ignore_eos = true}});
    }
    GenerationStats stats;
    const std::vector<Request> spec = pair->run(requests, true, {}, &stats);
    EXPECT_GT(stats.spec_rounds, 0);
    for (size_t r = 0; r < requests.size(); ++r)
      EXPECT_EQ(token_ids(spec[r]), expected[r]) << "prompt " << r;
  }
  EXPECT_GE(pairs, 1) << "no assisted_reference.json: run tools/make_fixtures.py --assisted";
}

// A batch under KV pressure, a small token budget (chunked prompts, trimmed drafts), a sequence
// limit and repeated prompts (prefix-cache hits), with a drafter that keeps everything (the target
// itself) and one that keeps little: every request gets the tokens it gets alone without drafts.
// Requests with penalties or a pending min_tokens (which draft from logits processed as they are
// judged, so the drafter that is the target keeps all their drafts too) and with stop tokens or
// short max_tokens (which end inside a kept run) share the batch.
TEST(SpeculativeEngineTest, SchedulingChangesNoToken) {
  int64_t preemptions = 0;
  for (const char* drafter : {"llama-tiny", "llama3-rope-tiny"}) {
    SCOPED_TRACE(drafter);
    auto pair = load_pair("llama-tiny", drafter, 4);
    std::vector<GenerationRequest> requests = reference_requests(*pair->target);
    const size_t originals = requests.size();
    for (size_t r = 0; r < originals; ++r)
      requests.push_back(requests[r]);  // prefixes repeat
    requests[1].params.repetition_penalty = 1.3;
    // Penalties that reward repeats (the fixture's greedy outputs repeat no token, so penalising
    // repeats changes nothing): each row's history, drafts included, changes its tokens.
    requests[1 + originals].params.frequency_penalty = -0.6;
    requests[1 + originals].params.presence_penalty = -0.5;
    requests[2].params.max_tokens = 7;  // ends inside a run of 5
    // Stops at the fifth token it would generate, inside a run.
    const std::vector<int32_t> fourth = reference_tokens(*pair->target)[3];
    requests[3].params.stop_token_ids = {fourth[4]};
    // Its third token ruled out (as a stop token) in its first 5 rows.
    const std::vector<int32_t> fifth = reference_tokens(*pair->target)[4 % originals];
    requests[4].params.min_tokens = 5;
    requests[4].params.stop_token_ids = {fifth[2]};
    // The solo reference: each request alone, without drafts.
    std::vector<std::vector<int32_t>> solo;
    for (const GenerationRequest& request : requests)
      solo.push_back(token_ids(pair->run({request}, false)[0]));
    EXPECT_EQ(solo[3].back(), fourth[4]);
    EXPECT_LE(solo[3].size(), 5u);
    EXPECT_EQ(solo[2].size(), 7u);
    EXPECT_NE(solo[1 + originals], reference_tokens(*pair->target)[1]);
    EXPECT_NE(solo[4], fifth);
    // Requests with penalties draft, alone too.
    for (size_t r : {size_t{1}, 1 + originals, size_t{4}}) {
      GenerationStats alone;
      EXPECT_EQ(token_ids(pair->run({requests[r]}, true, {}, &alone)[0]), solo[r]);
      EXPECT_GT(alone.spec_draft_tokens, 0);
    }
    struct Case {
      const char* label;
      SchedulerConfig scheduler;
      int64_t num_blocks;
    };
    const Case cases[] = {
        {"four sequences at a time", {.max_num_seqs = 4}, 400},
        {"chunks of 6 tokens, 3 sequences", {.max_num_seqs = 3, .max_num_batched_tokens = 6}, 400},
        {"a pool too small for the batch", {.max_num_batched_tokens = 64}, 44},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.label);
      pair->replan(c.num_blocks, 64);
      GenerationStats stats;
      const std::vector<Request> results = pair->run(requests, true, c.scheduler, &stats);
      for (size_t r = 0; r < requests.size(); ++r)
        EXPECT_EQ(token_ids(results[r]), solo[r]) << "request " << r;
      EXPECT_GT(stats.spec_rounds, 0);
      preemptions += stats.preemptions;
      if (c.num_blocks == 400) {
        EXPECT_GT(stats.prefix_hit_tokens, 0);
      }
      if (std::string(drafter) == "llama-tiny") {
        EXPECT_EQ(stats.spec_accepted_tokens, stats.spec_draft_tokens);  // it drafts itself
      }
    }
  }
  // The small pool preempted (drafts alone never do: they are dropped when blocks run short).
  EXPECT_GT(preemptions, 0);
}

// Drafting and acceptance draw from each request's own streams: a seeded request samples the same
// tokens alone and in a batch.
TEST(SpeculativeEngineTest, SeededSamplingIsReproducible) {
  auto pair = load_pair("mimo-tiny", "qwen3-tiny", 3);
  std::vector<GenerationRequest> requests = reference_requests(*pair->target);
  for (size_t r = 0; r < requests.size(); ++r) {
    requests[r].params.temperature = 0.8;
    requests[r].params.top_p = 0.9;
    requests[r].params.seed = 100 + r;
  }
  const std::vector<Request> batch = pair->run(requests, true);
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ(token_ids(pair->run({requests[r]}, true)[0]), token_ids(batch[r])) << r;
  }
}

// Pearson's chi-square for two samples of counts over the same cells (cells rarer than 10 in the
// two together are pooled), with its degrees of freedom.
std::pair<double, int64_t> two_sample_chi_square(const std::map<int32_t, int64_t>& a,
                                                 const std::map<int32_t, int64_t>& b) {
  std::map<int32_t, std::pair<int64_t, int64_t>> cells;
  for (const auto& [token, count] : a)
    cells[token].first += count;
  for (const auto& [token, count] : b)
    cells[token].second += count;
  std::vector<std::pair<int64_t, int64_t>> kept(1, {0, 0});  // kept[0]: the pooled rare cells
  for (const auto& [token, counts] : cells) {
    if (counts.first + counts.second < 10) {
      kept[0].first += counts.first;
      kept[0].second += counts.second;
    } else {
      kept.push_back(counts);
    }
  }
  if (kept[0].first + kept[0].second == 0) kept.erase(kept.begin());
  int64_t total_a = 0, total_b = 0;
  for (const auto& [x, y] : kept) {
    total_a += x;
    total_b += y;
  }
  const double total = static_cast<double>(total_a + total_b);
  double chi = 0;
  for (const auto& [x, y] : kept) {
    const double row = static_cast<double>(x + y);
    const double ea = row * total_a / total, eb = row * total_b / total;
    chi += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  return {chi, static_cast<int64_t>(kept.size()) - 1};
}

// The chi-square critical value at significance 0.001 (Wilson-Hilferty).
double critical_value(int64_t dof) {
  const double k = static_cast<double>(dof), z = 3.0902;
  const double c = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * c * c * c;
}

// The tokens each position takes over the requests.
std::vector<std::map<int32_t, int64_t>> position_counts(const std::vector<Request>& results,
                                                        size_t positions) {
  std::vector<std::map<int32_t, int64_t>> counts(positions);
  for (const Request& result : results) {
    const std::vector<int32_t> ids = token_ids(result);
    for (size_t p = 0; p < positions; ++p)
      ++counts[p][ids[p]];
  }
  return counts;
}

// A drafter that proposes the same token every time and claims it drew it from a distribution
// where it is very unlikely: it breaks the premise of the acceptance rule (drafts are drawn from
// the logits given), so the output drifts towards that token. The test below must see it.
class LyingProposer final : public Proposer {
 public:
  explicit LyingProposer(int64_t vocab) : vocab_(vocab) {}
  void propose(std::span<const ScheduledChunk> chunks, const KvCacheManager&) override {
    for (const ScheduledChunk& chunk : chunks) {
      chunk.request->draft_token_ids.assign(chunk.num_drafts, 7);
      chunk.request->draft_logits.clear();
      for (int64_t d = 0; d < chunk.num_drafts; ++d) {
        Tensor row = Tensor::empty({vocab_}, DType::kF32);
        row.data<float>()[7] = -20.0f;
        chunk.request->draft_logits.push_back(row);
      }
    }
  }
  void after_step(std::span<const ScheduledChunk>, std::span<const std::vector<SampledToken>>,
                  std::span<const int64_t>, const RunnerOutput&, const KvCacheManager&) override {}

 private:
  int64_t vocab_;
};

// Sampled tokens 2..4 of one prompt over 3000 seeds each way follow the same distribution with a
// real drafter (MiMo with a Qwen3 draft model: drafts are mostly rejected, so the residual rule is
// exercised) as without one; a planted broken drafter is caught by the same statistic.
TEST(SpeculativeEngineTest, SamplingIsLossless) {
  auto pair = load_pair("mimo-tiny", "qwen3-tiny", 3);
  constexpr int64_t kSeeds = 3000;
  constexpr size_t kPositions = 4;
  std::vector<GenerationRequest> requests;
  const std::vector<int32_t> prompt =
      pair->target->reference["prompts"][1]["prompt_token_ids"].get<std::vector<int32_t>>();
  for (int64_t s = 0; s < kSeeds; ++s) {
    requests.push_back({prompt,
                        {.temperature = 1.2,
                         .seed = static_cast<uint64_t>(s),
                         .max_tokens = kPositions,
                         .ignore_eos = true}});
  }
  pair->replan(2000);
  const SchedulerConfig scheduler{.max_num_seqs = 256, .max_num_batched_tokens = 2048};
  const auto plain = position_counts(pair->run(requests, false, scheduler), kPositions);
  GenerationStats stats;
  const auto spec = position_counts(pair->run(requests, true, scheduler, &stats), kPositions);
  EXPECT_GT(stats.spec_accepted_tokens, 0);  // some drafts were kept, some not
  EXPECT_LT(stats.spec_accepted_tokens, stats.spec_draft_tokens);
  // Position 0 comes from the prefill; 1..3 from verify steps.
  for (size_t p = 1; p < kPositions; ++p) {
    const auto [chi, dof] = two_sample_chi_square(plain[p], spec[p]);
    EXPECT_LT(chi, critical_value(dof)) << "position " << p << " (" << dof << " dof)";
  }

  // The same statistic with the broken drafter.
  const EngineConfig config{.vocab_size = pair->target->config.vocab_size,
                            .max_model_len = pair->target->plan.max_model_len,
                            .scheduler = scheduler};
  Engine engine(*pair->target->model, pair->target->plan, pair->target->memory, config,
                std::make_unique<LyingProposer>(config.vocab_size), 3);
  std::vector<int64_t> ids;
  for (const GenerationRequest& request : requests)
    ids.push_back(engine.add_request(request));
  while (engine.has_unfinished())
    engine.step();
  std::vector<Request> lying;
  for (int64_t id : ids)
    lying.push_back(engine.request(id));
  const auto broken = position_counts(lying, kPositions);
  const auto [chi, dof] = two_sample_chi_square(plain[1], broken[1]);
  EXPECT_GT(chi, critical_value(dof)) << "the planted drafter went unnoticed";
}

}  // namespace
}  // namespace pagoda
