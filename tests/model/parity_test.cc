// pagoda against transformers on the committed fixtures (tools/make_fixtures.py): prompt
// log-probabilities within 1e-4 (f32), the same greedy tokens, and batches that change nothing.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/cache_setup.h"
#include "engine/generator.h"

namespace pagoda {
namespace {

constexpr double kLogprobTolerance = 1e-4;

struct Fixture {
  ModelConfig config;
  std::unique_ptr<CausalLm> model;
  CacheSetup cache;
  KvCache memory;
  nlohmann::json reference;
};

std::unique_ptr<Fixture> load_fixture(const std::string& name) {
  const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name;
  auto fixture = std::make_unique<Fixture>();
  fixture->config = load_model_config(dir);
  WeightSource weights = WeightSource::from_checkpoint(dir);
  fixture->model = build_causal_lm(fixture->config, weights);
  EXPECT_TRUE(weights.unused().empty());
  CacheFlags flags;
  flags.num_blocks = 200;
  flags.block_size = 4;  // small blocks: every prompt spans several
  fixture->cache = plan_cache(fixture->config, nullptr, flags);
  fixture->memory = allocate_kv_cache(fixture->cache.plan, Device::cpu());
  std::ifstream file(dir + "/reference.json");
  fixture->reference = nlohmann::json::parse(file);
  return fixture;
}

std::vector<GenerationResult> run(Fixture& fixture,
                                  const std::vector<GenerationRequest>& requests) {
  const GeneratorConfig config{.vocab_size = fixture.config.vocab_size,
                               .max_model_len = fixture.cache.plan.max_model_len,
                               .eos_token_ids = fixture.config.eos_token_ids};
  return generate(*fixture.model, fixture.cache.plan, fixture.memory, config, requests);
}

GenerationRequest request_for(const nlohmann::json& prompt) {
  return {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
          .params = {.temperature = 0.0,
                     .max_tokens = static_cast<int64_t>(prompt["greedy_token_ids"].size()),
                     .ignore_eos = true,
                     .logprobs = 5,
                     .prompt_logprobs = 5}};
}

class ParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParityTest, MatchesTransformers) {
  auto fixture = load_fixture(GetParam());
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : fixture->reference["prompts"]) {
    requests.push_back(request_for(prompt));
  }
  // Every prompt alone, then all of them in one batch: the same tokens either way.
  std::vector<GenerationResult> alone;
  for (const GenerationRequest& request : requests)
    alone.push_back(run(*fixture, {request}).front());
  const std::vector<GenerationResult> batched = run(*fixture, requests);

  double worst = 0;
  for (size_t p = 0; p < requests.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const nlohmann::json& expected = fixture->reference["prompts"][p];
    const GenerationResult& result = alone[p];
    std::vector<int32_t> tokens;
    for (const SampledToken& token : result.tokens)
      tokens.push_back(token.token_id);
    EXPECT_EQ(tokens, expected["greedy_token_ids"].get<std::vector<int32_t>>());
    std::vector<int32_t> batched_tokens;
    for (const SampledToken& token : batched[p].tokens)
      batched_tokens.push_back(token.token_id);
    EXPECT_EQ(batched_tokens, tokens);

    const nlohmann::json& prompt_logprobs = expected["prompt_logprobs"];
    ASSERT_EQ(result.prompt_logprobs.size(), prompt_logprobs.size());
    EXPECT_FALSE(result.prompt_logprobs[0].has_value());
    for (size_t i = 1; i < prompt_logprobs.size(); ++i) {
      const double diff =
          std::abs(result.prompt_logprobs[i]->logprob - prompt_logprobs[i].get<double>());
      worst = std::max(worst, diff);
      EXPECT_LE(diff, kLogprobTolerance) << "prompt token " << i;
    }
    // The top-5 after the prompt, ids and values.
    const nlohmann::json& top = expected["prompt_top_logprobs_last"];
    for (size_t k = 0; k < top.size(); ++k) {
      EXPECT_EQ(result.tokens[0].top[k].token_id, top[k][0].get<int32_t>());
      EXPECT_NEAR(result.tokens[0].top[k].logprob, top[k][1].get<double>(), kLogprobTolerance);
    }
    const nlohmann::json& greedy_logprobs = expected["greedy_logprobs"];
    for (size_t t = 0; t < result.tokens.size(); ++t) {
      EXPECT_NEAR(result.tokens[t].logprob, greedy_logprobs[t].get<double>(), kLogprobTolerance);
    }
  }
  std::printf("[ parity   ] %s: worst prompt logprob difference %.2e\n", GetParam(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParityTest,
                         ::testing::Values("llama-tiny", "llama3-rope-tiny", "qwen3-tiny",
                                           "gemma4-tiny", "gemma4-noshare-tiny", "mimo-tiny"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(GeneratorTest, RejectsBadRequests) {
  auto fixture = load_fixture("llama-tiny");
  auto greedy = [](std::vector<int32_t> prompt, int64_t max_tokens = 4) {
    return GenerationRequest{std::move(prompt), {.temperature = 0.0, .max_tokens = max_tokens}};
  };
  GenerationRequest negative_logprobs = greedy({1});
  negative_logprobs.params.logprobs = -1;
  GenerationRequest bad_top_p = greedy({1});
  bad_top_p.params.top_p = 2.0;
  const std::vector<std::pair<GenerationRequest, std::string>> cases = {
      {greedy({}), "empty prompt"},
      {greedy({1, 256}), "token id 256"},
      {greedy({1, -3}), "token id -3"},
      {greedy({1}, 0), "max_tokens is 0"},
      {greedy({1}, 300), "exceeds max_model_len 256"},
      {negative_logprobs, "must not be negative"},
      {bad_top_p, "request 0: top_p is 2"},
  };
  for (const auto& [request, message] : cases) {
    try {
      run(*fixture, {request});
      ADD_FAILURE() << "expected an error containing " << message;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
}

TEST(GeneratorTest, StopsAtEndOfSequence) {
  auto fixture = load_fixture("llama-tiny");
  // Find a prompt whose greedy continuation meets an EOS id of the config (2), then stop there.
  GenerationRequest request = request_for(fixture->reference["prompts"][3]);
  const GenerationResult full = run(*fixture, {request}).front();
  fixture->config.eos_token_ids = {full.tokens[3].token_id};
  request.params.ignore_eos = false;
  const GenerationResult stopped = run(*fixture, {request}).front();
  size_t first = 0;
  while (full.tokens[first].token_id != full.tokens[3].token_id)
    ++first;
  EXPECT_EQ(stopped.tokens.size(), first + 1);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(full.finish_reason, "length");
}

}  // namespace
}  // namespace pagoda
