// pagoda against transformers on the committed fixtures (tools/make_fixtures.py): prompt
// log-probabilities within 1e-4 (f32), the same greedy tokens, and batches that change nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "model/fixtures.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

constexpr double kLogprobTolerance = 1e-4;

class ParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParityTest, MatchesTransformers) {
  auto fixture = load_fixture(GetParam());
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : fixture->reference["prompts"]) {
    requests.push_back(request_for(prompt));
  }
  // Every prompt alone, then all of them in one batch: the same tokens either way.
  std::vector<Request> alone;
  for (const GenerationRequest& request : requests)
    alone.push_back(run(*fixture, {request}).front());
  const std::vector<Request> batched = run(*fixture, requests);

  double worst = 0;
  for (size_t p = 0; p < requests.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const nlohmann::json& expected = fixture->reference["prompts"][p];
    const Request& result = alone[p];
    const std::vector<int32_t> tokens = token_ids(result);
    EXPECT_EQ(tokens, expected["greedy_token_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(token_ids(batched[p]), tokens);

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
      EXPECT_EQ(result.output_logprobs[0].top[k].token_id, top[k][0].get<int32_t>());
      EXPECT_NEAR(result.output_logprobs[0].top[k].logprob, top[k][1].get<double>(),
                  kLogprobTolerance);
    }
    const nlohmann::json& greedy_logprobs = expected["greedy_logprobs"];
    for (size_t t = 0; t < result.output_logprobs.size(); ++t) {
      EXPECT_NEAR(result.output_logprobs[t].logprob, greedy_logprobs[t].get<double>(),
                  kLogprobTolerance);
    }
  }
  std::printf("[ parity   ] %s: worst prompt logprob difference %.2e\n", GetParam(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParityTest,
                         ::testing::Values("llama-tiny", "llama3-rope-tiny", "qwen3-tiny",
                                           "gemma4-tiny", "gemma4-noshare-tiny", "mimo-tiny",
                                           "kjv-gemma4", "llama-fp8-tiny", "mimo-fp8-tiny"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

// The default model's tokenizer gives the reference prompts' ids from their text, and its
// continuation decodes to text.
TEST(DefaultModelTest, TokenizerEncodesTheReferencePrompts) {
  const Tokenizer tokenizer = Tokenizer::load(checkpoint_dir("kjv-gemma4"));
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/kjv-gemma4/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(file);
  for (const nlohmann::json& prompt : reference["prompts"]) {
    const auto ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.encode(prompt["text"].get<std::string>()), ids);
    EXPECT_EQ(tokenizer.decode(ids, {.skip_special_tokens = true}), prompt["text"]);
  }
}
}  // namespace
}  // namespace pagoda
