#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

// Six tokens with probabilities 0.35, 0.25, 0.15, 0.12, 0.08, 0.05 at temperature 1.
const std::vector<double> kProbs = {0.35, 0.25, 0.15, 0.12, 0.08, 0.05};

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs)
    logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Draws `n` tokens and checks the histogram against `expected` (probabilities, zero where a token
// must never appear) with a chi-square bound at the 0.1% level.
void expect_distribution(const SamplingParams& params, const std::vector<double>& expected) {
  const std::vector<float> logits = logits_of(kProbs);
  constexpr int kDraws = 40000;
  std::vector<int> counts(kProbs.size(), 0);
  SamplerRng rng(12345);
  for (int i = 0; i < kDraws; ++i) {
    ++counts[sample_token(logits.data(), static_cast<int64_t>(logits.size()), params, rng)];
  }
  double chi2 = 0;
  int cells = 0;
  for (size_t t = 0; t < expected.size(); ++t) {
    if (expected[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " must not be drawn";
      continue;
    }
    const double e = expected[t] * kDraws;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
    ++cells;
  }
  // Chi-square critical values at p = 0.001 for 1..5 degrees of freedom.
  const double critical[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52};
  EXPECT_LT(chi2, critical[cells - 1]) << "chi-square over " << cells << " cells";
}

std::vector<double> normalised(std::vector<double> weights) {
  double total = 0;
  for (double w : weights)
    total += w;
  for (double& w : weights)
    w /= total;
  return weights;
}

TEST(SamplerTest, TemperatureOne) {
  expect_distribution({.temperature = 1.0}, kProbs);
}

TEST(SamplerTest, TemperatureSharpens) {
  std::vector<double> sharper;
  for (double p : kProbs)
    sharper.push_back(p * p);  // temperature 0.5 squares probabilities
  expect_distribution({.temperature = 0.5}, normalised(sharper));
}

TEST(SamplerTest, TopK) {
  expect_distribution({.top_k = 3}, normalised({0.35, 0.25, 0.15, 0, 0, 0}));
}

TEST(SamplerTest, TopP) {
  // 0.35 + 0.25 = 0.60 < 0.7, so the third token completes the set.
  expect_distribution({.top_p = 0.7}, normalised({0.35, 0.25, 0.15, 0, 0, 0}));
}

TEST(SamplerTest, MinP) {
  // Keep tokens with p >= 0.3 * 0.35 = 0.105.
  expect_distribution({.min_p = 0.3}, normalised({0.35, 0.25, 0.15, 0.12, 0, 0}));
}

TEST(SamplerTest, FiltersCompose) {
  // min-p leaves four tokens, top-k three, top-p of the renormalised three (0.467, 0.333, 0.2) two.
  expect_distribution({.top_k = 3, .top_p = 0.75, .min_p = 0.3},
                      normalised({0.35, 0.25, 0, 0, 0, 0}));
}

TEST(SamplerTest, GreedyAndSeeds) {
  const std::vector<float> logits = logits_of(kProbs);
  SamplerRng rng(1);
  EXPECT_EQ(sample_token(logits.data(), 6, {.temperature = 0.0}, rng), 0);
  auto draws = [&](uint64_t seed) {
    SamplerRng stream(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i)
      out.push_back(sample_token(logits.data(), 6, {}, stream));
    return out;
  };
  EXPECT_EQ(draws(7), draws(7));
  EXPECT_NE(draws(7), draws(8));
}

// As vLLM reads a temperature: below 1e-5 greedy, below 0.01 raised to 0.01. Logits divided by a
// temperature of 1e-310 overflowed to infinities whose difference is NaN, and every draw fell
// through to the last token.
TEST(SamplerTest, TinyTemperaturesAreGreedyOrRaised) {
  // Within 1% of the most likely logit, so that 0.01 still leaves a distribution.
  const std::vector<float> logits = {0.0f, 0.005f, -0.01f, -50.0f};
  SamplerRng rng(3);
  for (const double greedy : {1e-310, 1e-300, 9e-6}) {
    SCOPED_TRACE(greedy);
    EXPECT_TRUE((SamplingParams{.temperature = greedy}.greedy()));
    EXPECT_EQ(sample_token(logits.data(), 4, {.temperature = greedy}, rng), 1);
  }
  for (const double tiny : {1e-5, 1e-3}) {
    SCOPED_TRACE(tiny);
    const SamplingParams params{.temperature = tiny};
    EXPECT_FALSE(params.greedy());
    EXPECT_EQ(params.sampling_temperature(), SamplingParams::kMinTemperature);
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < 2000; ++i)
      ++counts[sample_token(logits.data(), 4, params, rng)];
    // At temperature 0.01: about 0.33, 0.55 and 0.12 for the first three, never the last.
    EXPECT_GT(counts[0], 500);
    EXPECT_GT(counts[1], 900);
    EXPECT_GT(counts[2], 150);
    EXPECT_EQ(counts[3], 0);
  }
}

TEST(SamplerTest, Penalties) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  // Token 0 in the prompt; tokens 1 (twice) and 3 in the output.
  const std::vector<int32_t> prompt = {0};
  const std::vector<int32_t> output = {1, 3, 1};
  apply_penalties(logits.data(), 4, prompt, output,
                  {.presence_penalty = 0.5, .frequency_penalty = 0.25, .repetition_penalty = 2.0});
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                      // 2 / 2, in the prompt only
  EXPECT_FLOAT_EQ(logits[1], -2.0f - 2 * 0.25f - 0.5f);  // -1 * 2, then two occurrences
  EXPECT_FLOAT_EQ(logits[2], 0.5f);                      // never seen
  EXPECT_FLOAT_EQ(logits[3], 1.5f - 0.25f - 0.5f);       // 3 / 2, then one occurrence
}

// A verify step of request `request` (its last token and `drafts`) over `rows` of raw logits: the
// tokens the sampler keeps.
std::vector<int32_t> verified(Sampler& sampler, Request& request, std::vector<int32_t> drafts,
                              const std::vector<std::vector<float>>& rows) {
  request.draft_token_ids = std::move(drafts);
  const int64_t k = static_cast<int64_t>(request.draft_token_ids.size());
  const ScheduledChunk chunk{&request, request.num_tokens() - 1, 1, k};
  sampler.prepare({&chunk, 1}, false);
  const int64_t vocab = static_cast<int64_t>(rows[0].size());
  Tensor logits = Tensor::empty({k + 1, vocab}, DType::kF32);
  for (int64_t j = 0; j <= k; ++j)
    std::copy(rows[j].begin(), rows[j].end(), logits.data<float>() + j * vocab);
  const std::vector<int64_t> first_rows = {0};
  std::vector<int32_t> ids;
  for (const SampledToken& token : sampler.sample(logits, first_rows)[0])
    ids.push_back(token.token_id);
  return ids;
}

// Verify rows are judged as the request would sample them one at a time: row j with the
// penalties of the output and drafts 0..j-1, and the stop tokens ruled out while fewer than
// min_tokens tokens come before it.
TEST(SamplerTest, VerifyRowsSeeTheDraftsBeforeThem) {
  Sampler sampler({.eos_token_ids = {0}});
  // Presence penalty 2: the draft 2 of row 0 pushes row 1's 2 (3 - 2 = 1) below its 3 (2).
  Request penalised(0, {5}, {.temperature = 0.0, .max_tokens = 8, .presence_penalty = 2.0}, 1);
  EXPECT_EQ(
      verified(sampler, penalised, {2, 2, 3},
               {{0, 0, 3, 0, 0, 0}, {0, 0, 3, 2, 0, 0}, {0, 0, 0, 9, 0, 0}, {0, 0, 0, 0, 0, 9}}),
      (std::vector<int32_t>{2, 3}));
  // min_tokens 2 with nothing generated yet: EOS (0) is ruled out in rows 0 and 1 only, so row 1
  // takes 4 and the EOS drafted for row 2 is kept.
  Request short_of_min(1, {5}, {.temperature = 0.0, .max_tokens = 8, .min_tokens = 2}, 1);
  EXPECT_EQ(
      verified(sampler, short_of_min, {1, 4, 0},
               {{9, 8, 0, 0, 0, 0}, {9, 0, 0, 0, 8, 0}, {9, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 9}}),
      (std::vector<int32_t>{1, 4, 0, 5}));
}

// NaN logits (a model gone wrong) are never drawn and never reach the sort's comparisons; an
// infinite one is the only choice; all NaN leaves every token equally likely.
TEST(SamplerTest, NaNAndInfiniteLogitsStillDraw) {
  SamplerRng rng(5);
  const std::vector<float> some_nan = {NAN, 1.0f, NAN, 1.0f};
  for (int i = 0; i < 200; ++i) {
    const int32_t token = sample_token(some_nan.data(), 4, {.top_p = 0.9}, rng);
    EXPECT_TRUE(token == 1 || token == 3) << token;
  }
  const std::vector<float> infinite = {1.0f, INFINITY, 2.0f};
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(sample_token(infinite.data(), 3, {}, rng), 1);
  const std::vector<float> all_nan(5, NAN);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 500; ++i)
    ++counts[sample_token(all_nan.data(), 5, {}, rng)];
  for (int count : counts)
    EXPECT_GT(count, 50);
}

TEST(SamplingParamsTest, ValidationNamesTheParameter) {
  const std::vector<std::pair<SamplingParams, std::string>> cases = {
      {{.temperature = -0.1}, "temperature"},
      {{.temperature = NAN}, "temperature is nan"},
      {{.top_k = -2}, "top_k"},
      {{.top_p = 0.0}, "top_p"},
      {{.top_p = 1.5}, "top_p"},
      {{.min_p = -0.5}, "min_p"},
      {{.max_tokens = 0}, "max_tokens"},
      {{.max_tokens = 4, .min_tokens = 5}, "min_tokens"},
      {{.stop_token_ids = {300}}, "stop token id 300"},
      {{.presence_penalty = 3.0}, "presence_penalty"},
      {{.repetition_penalty = 0.0}, "repetition_penalty"},
      // A float would hold it as 0.
      {{.repetition_penalty = 1e-46}, "repetition_penalty is 1e-46; it must be in [1e-30, 1e30]"},
      {{.logprobs = -1}, "logprobs"},
  };
  for (const auto& [params, name] : cases) {
    try {
      params.validate(256);
      ADD_FAILURE() << "expected an error about " << name;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
    }
  }
  EXPECT_NO_THROW(SamplingParams{}.validate(256));
}

// The one reader of request fields that prompts files and the server share.
TEST(SamplingParamsTest, ReadsRequestFieldsOverDefaults) {
  using Json = nlohmann::ordered_json;
  const std::string_view other[] = {"prompt", "temperature_note"};
  const SamplingParams params = read_sampling_params(
      Json::parse(R"({"prompt": "x", "temperature": 0.5, "top_k": 3, "seed": 9, "max_tokens": 7,
                      "stop_token_ids": [1, 2], "ignore_eos": true, "logprobs": 2,
                      "prompt_logprobs": 1, "top_p": null, "temperature_note": {"any": 1}})"),
      {.temperature = 0.0, .top_p = 0.8}, other);
  EXPECT_EQ(params.temperature, 0.5);
  EXPECT_EQ(params.top_p, 0.8);  // null keeps the default
  EXPECT_EQ(params.top_k, 3);
  EXPECT_EQ(params.seed, 9u);
  EXPECT_EQ(params.max_tokens, 7);
  EXPECT_EQ(params.stop_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(params.ignore_eos);
  EXPECT_EQ(params.logprobs, 2);
  EXPECT_EQ(params.prompt_logprobs, 1);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"temprature": 1})", "temprature"},
      {R"({"top_k": 1.5})", "top_k"},
      {R"({"max_tokens": "5"})", "max_tokens"},
      {R"({"ignore_eos": 1})", "ignore_eos"},
      {R"({"stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"seed": 18446744073709551615})", "seed"},
  };
  for (const auto& [body, field] : bad) {
    try {
      read_sampling_params(Json::parse(body), {}, {});
      ADD_FAILURE() << body << " was accepted";
    } catch (const FieldError& error) {
      EXPECT_EQ(error.field, field) << body;
      EXPECT_NE(std::string(error.what()).find(field), std::string::npos) << error.what();
    }
  }
  // A long value is quoted by a short prefix.
  try {
    read_sampling_params(Json::parse(R"({"temperature": ")" + std::string(500, 'h') + R"("})"), {},
                         {});
    ADD_FAILURE() << "a string temperature was accepted";
  } catch (const FieldError& error) {
    EXPECT_LT(std::string(error.what()).size(), 100u) << error.what();
  }
}

}  // namespace
}  // namespace pagoda
