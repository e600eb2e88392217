#include "engine/spec_acceptance.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <vector>

#include "engine/sampler.h"

namespace pagoda {
namespace {

constexpr int64_t kVocab = 6;
using Row = std::array<float, kVocab>;

TEST(SpecAcceptanceTest, GreedyKeepsDraftsWhileTheyAreTheArgmax) {
  const Row a{0, 0, 0, 5, 0, 0}, b{0, 0, 0, 0, 0, 5}, c{0, 5, 0, 0, 0, 0};
  const std::vector<const float*> rows{a.data(), b.data(), c.data()};
  const SamplingParams greedy{.temperature = 0.0};
  Acceptance out = accept_drafts(rows, {}, std::vector<int32_t>{3, 4}, kVocab, greedy, {});
  EXPECT_EQ(out.accepted, 1);
  EXPECT_EQ(out.next, 5);  // the correction: the target's choice where draft 1 was wrong
  out = accept_drafts(rows, {}, std::vector<int32_t>{3, 5}, kVocab, greedy, {});
  EXPECT_EQ(out.accepted, 2);
  EXPECT_EQ(out.next, 1);  // the bonus token
  out = accept_drafts(rows, {}, std::vector<int32_t>{2, 5}, kVocab, greedy, {});
  EXPECT_EQ(out.accepted, 0);
  EXPECT_EQ(out.next, 3);
}

// Pearson's chi-square of `counts` against n draws from `expected` (probabilities); a count where
// the probability is 0 makes it infinite.
double chi_square(const std::array<int64_t, kVocab>& counts, const std::vector<double>& expected,
                  int64_t n) {
  double chi = 0;
  for (int64_t t = 0; t < kVocab; ++t) {
    if (expected[t] == 0) {
      if (counts[t] > 0) return INFINITY;
      continue;
    }
    const double e = expected[t] * static_cast<double>(n);
    chi += (static_cast<double>(counts[t]) - e) * (static_cast<double>(counts[t]) - e) / e;
  }
  return chi;
}

std::vector<double> distribution(const Row& logits, const SamplingParams& params) {
  const FilteredDistribution filtered = filter_distribution(logits.data(), kVocab, params);
  std::vector<double> p(kVocab);
  for (int32_t t = 0; t < kVocab; ++t)
    p[t] = filtered.probability(t);
  return p;
}

// The first two tokens out of speculative steps, over many draws, follow the target's
// distributions: a drafter that proposes from another distribution changes nothing. Context-free
// rows stand for a model here (each position's distribution is the same whatever came before), so
// a second token after a step that kept no draft is drawn from the target's row as the next step
// would. The same statistic must reject planted wrong rules.
TEST(SpecAcceptanceTest, SamplingIsLossless) {
  const Row target0{2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f},
      target1{0.0f, 2.0f, 0.0f, 1.0f, 0.5f, 0.0f}, target2{1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f};
  const Row draft0{0.0f, 2.0f, 1.5f, 1.0f, 0.0f, -1.0f}, draft1{1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  const SamplingParams params{.temperature = 0.9, .top_k = 5};
  const std::vector<const float*> targets{target0.data(), target1.data(), target2.data()};
  const std::vector<const float*> drafts_rows{draft0.data(), draft1.data()};
  const FilteredDistribution q0 = filter_distribution(draft0.data(), kVocab, params);
  const FilteredDistribution q1 = filter_distribution(draft1.data(), kVocab, params);
  const FilteredDistribution p1 = filter_distribution(target1.data(), kVocab, params);

  constexpr int64_t kTrials = 40000;
  // The chi-square critical value at significance 0.001 for 4 degrees of freedom: top-k keeps 5
  // of the 6 tokens.
  constexpr double kCritical4 = 18.47;
  const FilteredDistribution p0 = filter_distribution(target0.data(), kVocab, params);
  std::array<int64_t, kVocab> first{}, second{}, always_first{}, resample_first{};
  SamplerRng rng(7);
  for (int64_t trial = 0; trial < kTrials; ++trial) {
    const std::vector<int32_t> drafted{q0.draw(rng.uniform()), q1.draw(rng.uniform())};
    const Acceptance out = accept_drafts(targets, drafts_rows, drafted, kVocab, params,
                                         acceptance_draws(params, 2, rng));
    ++first[out.accepted >= 1 ? drafted[0] : out.next];
    ++second[out.accepted >= 2   ? drafted[1]
             : out.accepted == 1 ? out.next
                                 : p1.draw(rng.uniform())];
    // Two planted wrong rules: every draft kept; or, at a rejection, a fresh draw from p instead
    // of from the residual max(0, p - q) (a classic mistake).
    ++always_first[drafted[0]];
    ++resample_first[out.accepted >= 1 ? drafted[0] : p0.draw(rng.uniform())];
  }
  const double chi_first = chi_square(first, distribution(target0, params), kTrials);
  const double chi_second = chi_square(second, distribution(target1, params), kTrials);
  EXPECT_LT(chi_first, kCritical4) << "first token";
  EXPECT_LT(chi_second, kCritical4) << "second token";
  EXPECT_GT(chi_square(always_first, distribution(target0, params), kTrials), kCritical4)
      << "the test cannot tell a rule that keeps every draft";
  EXPECT_GT(chi_square(resample_first, distribution(target0, params), kTrials), kCritical4)
      << "the test cannot tell a rule that resamples from p";
}

}  // namespace
}  // namespace pagoda
