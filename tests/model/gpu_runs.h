// Greedy runs of a fixture's reference prompts, and how two of them are compared, for the tests
// that hold a GPU path to another path within bf16 rounding: prompt log-probabilities by their
// mean and worst difference, greedy sequences by where they first part, which must be a near-tie.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/engine.h"

namespace pagoda::testing {

// Greedy tokens may part only where the two candidates are this close in log-probability.
constexpr double kNearTie = 0.1;

struct ModelRun {
  std::vector<std::vector<SampledToken>> tokens;
  std::vector<std::vector<double>> prompt_logprobs;  // from the second prompt token on
};

// Each reference prompt, greedy for as many tokens as transformers generated, with the top 5
// log-probabilities of each token and the prompt's log-probabilities.
inline std::vector<GenerationRequest> greedy_requests(const nlohmann::json& prompts) {
  std::vector<GenerationRequest> requests;
  for (const nlohmann::json& prompt : prompts) {
    requests.push_back(
        {.prompt_token_ids = prompt["prompt_token_ids"].get<std::vector<int32_t>>(),
         .params = {.temperature = 0.0,
                    .max_tokens = static_cast<int64_t>(prompt["greedy_token_ids"].size()),
                    .ignore_eos = true,
                    .logprobs = 5,
                    .prompt_logprobs = 0}});
  }
  EXPECT_FALSE(requests.empty());
  return requests;
}

// The tokens and prompt log-probabilities of finished greedy_requests(); each must have run to
// its length.
inline ModelRun collect_run(const std::vector<Request>& results) {
  ModelRun out;
  for (const Request& result : results) {
    EXPECT_EQ(result.finish_reason, FinishReason::kLength) << result.error;
    out.tokens.push_back(result.output_tokens());
    std::vector<double>& logprobs = out.prompt_logprobs.emplace_back();
    for (size_t i = 1; i < result.prompt_logprobs.size(); ++i)
      logprobs.push_back(result.prompt_logprobs[i]->logprob);
  }
  return out;
}

struct Difference {
  double mean = 0;
  double worst = 0;
};

inline Difference compare(const std::vector<std::vector<double>>& a,
                          const std::vector<std::vector<double>>& b) {
  Difference d;
  int64_t count = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t p = 0; p < std::min(a.size(), b.size()); ++p) {
    EXPECT_EQ(a[p].size(), b[p].size());
    for (size_t i = 0; i < std::min(a[p].size(), b[p].size()); ++i) {
      const double diff = std::abs(a[p][i] - b[p][i]);
      EXPECT_FALSE(std::isnan(diff));
      d.mean += diff;
      d.worst = std::max(d.worst, diff);
      ++count;
    }
  }
  EXPECT_GT(count, 0);
  d.mean /= std::max<int64_t>(count, 1);
  return d;
}

// Greedy tokens equal `expected` up to a first difference, which must be a near-tie in `got`'s
// own top log-probabilities (any difference with `any_split`). Returns the share of tokens before
// any difference.
inline double check_greedy(const std::vector<std::vector<SampledToken>>& got,
                           const std::vector<std::vector<int32_t>>& expected, bool any_split) {
  int64_t same = 0;
  int64_t total = 0;
  EXPECT_EQ(got.size(), expected.size());
  for (size_t p = 0; p < std::min(got.size(), expected.size()); ++p) {
    total += static_cast<int64_t>(expected[p].size());
    for (size_t i = 0; i < expected[p].size() && i < got[p].size(); ++i) {
      if (got[p][i].token_id == expected[p][i]) {
        ++same;
        continue;
      }
      const std::vector<TokenLogprob>& top = got[p][i].top;
      const auto other = std::find_if(top.begin(), top.end(), [&](const TokenLogprob& t) {
        return t.token_id == expected[p][i];
      });
      EXPECT_TRUE(any_split ||
                  (other != top.end() && got[p][i].logprob - other->logprob <= kNearTie))
          << "prompt " << p << " token " << i << ": " << got[p][i].token_id << " for "
          << expected[p][i] << ", not a near-tie";
      break;
    }
  }
  return static_cast<double>(same) / static_cast<double>(std::max<int64_t>(total, 1));
}

inline std::vector<std::vector<int32_t>> ids_of(
    const std::vector<std::vector<SampledToken>>& tokens) {
  std::vector<std::vector<int32_t>> ids;
  for (const auto& seq : tokens) {
    ids.emplace_back();
    for (const SampledToken& token : seq)
      ids.back().push_back(token.token_id);
  }
  return ids;
}

}  // namespace pagoda::testing
