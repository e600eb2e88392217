// The GPU sampler's device code (ops/cuda/sampling_row.cuh) run on the host under an emulation of
// the CUDA built-ins (cuda_emulation.h), against the host sampler: the token of every row, greedy
// or filtered, its repetition, and the judging of drafts; rows taken by one block or shared by a
// cluster of two or three. The same code runs on the GPU in CudaSamplingTest; this runs it where
// no GPU is, synchronization included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/spec_acceptance.h"
#include "tests/engine/sampling_cases.h"

// Last: the emulation defines the CUDA names, and the device code compiles against them.
#include "tests/ops/cuda_emulation.h"
//
#include "ops/cuda/sampling_row.cuh"

namespace pagoda {
namespace {

using cuda::sampling::kThreads;

// Each row of logits [rows, vocab] sampled by the device code, one emulated cluster of `cluster`
// blocks a row.
struct Sampled {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<int32_t> kept;
};

Sampled sample_on_emulated_device(const std::vector<float>& logits, int64_t vocab,
                                  const std::vector<SamplingRow>& rows, unsigned cluster,
                                  const std::vector<float>& draft_logits = {}) {
  const size_t count = rows.size();
  Sampled out{std::vector<int32_t>(count, -1), std::vector<float>(count, NAN),
              std::vector<int32_t>(count, -1)};
  // The blocks' shared memory, by cluster rank: one cluster runs at a time.
  static std::vector<cuda::sampling::Shared> shared(4);
  EXPECT_LE(cluster, shared.size());
  const auto kernel = [&] {
    cuda::sampling::sample_row(blockIdx.x / cluster, logits.data(), static_cast<int>(vocab),
                               rows.data(), draft_logits.empty() ? nullptr : draft_logits.data(),
                               out.ids.data(), out.logprobs.data(), out.kept.data(),
                               shared[cluster_rank()]);
  };
  emulation::launch(kernel, static_cast<unsigned>(count) * cluster, kThreads, cluster);
  return out;
}

// The parameters of each case.
std::vector<SamplingParams> filters() {
  std::vector<SamplingParams> out;
  for (const SamplingCase& c : sampling_cases())
    out.push_back(c.params);
  return out;
}

TEST(SamplingEmulationTest, PicksTheHostSamplersToken) {
  std::mt19937 rng(7);
  const std::vector<SamplingParams> all = filters();
  const int64_t rows = static_cast<int64_t>(all.size());
  const int64_t vocab = 3000;
  const std::vector<float> logits = sampling_logits(rows, vocab, rng);
  const double draw = 0.37;
  std::vector<SamplingRow> params;
  for (const SamplingParams& p : all)
    params.push_back(device_sampling_row(p, draw));
  const Sampled got = sample_on_emulated_device(logits, vocab, params, 2);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    ASSERT_EQ(got.ids[r], sample_token(row, vocab, all[r], draw)) << r;
    // Its log-probability under the raw logits.
    const float max = *std::max_element(row, row + vocab);
    double total = 0.0;
    for (int64_t i = 0; i < vocab; ++i)
      total += std::exp(static_cast<double>(row[i]) - max);
    EXPECT_NEAR(got.logprobs[r], row[got.ids[r]] - max - std::log(total), 1e-4) << r;
  }
}

// One finite logit far below the rest stretches the bins, so the rest (distinct values in a
// narrow band) share one bin, which must be narrowed by digits of the sort key.
TEST(SamplingEmulationTest, NarrowsCrowdedBins) {
  std::mt19937 rng(13);
  std::normal_distribution<float> narrow(0.0f, 0.01f);
  const std::vector<SamplingParams> all = {filters()[1], filters()[2], filters()[4], filters()[7]};
  const int64_t rows = static_cast<int64_t>(all.size());
  const int64_t vocab = 3000;
  std::vector<float> logits(rows * vocab);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i)
      logits[r * vocab + i] = narrow(rng);
    logits[r * vocab + r] = -1e30f;
  }
  std::vector<SamplingRow> params;
  for (const SamplingParams& p : all)
    params.push_back(device_sampling_row(p, 0.61));
  const Sampled got = sample_on_emulated_device(logits, vocab, params, 3);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(got.ids[r], sample_token(logits.data() + r * vocab, vocab, all[r], 0.61)) << r;
}

// Rows shaped like a language model's: a bulk of unlikely tokens and a few far above it, so the
// filters keep a short head of the order, which the first filter's crossing gathers and the later
// ones (and the draw) scan again. Each case draws at both ends of [0, 1) and in between.
TEST(SamplingEmulationTest, LaterCrossingsReuseTheSortedHead) {
  std::mt19937 rng(29);
  std::normal_distribution<float> bulk(0.0f, 2.0f);
  const std::vector<SamplingParams> all = filters();
  const double draws[] = {0.0, 0.43, 0.999};
  const int64_t vocab = 2000;
  std::vector<float> logits;
  std::vector<SamplingParams> cases;
  std::vector<SamplingRow> params;
  for (const SamplingParams& p : all) {
    if (p.greedy()) continue;
    for (double draw : draws) {
      const size_t row = logits.size();
      for (int64_t i = 0; i < vocab; ++i)
        logits.push_back(bulk(rng));
      for (int i = 0; i < 12; ++i)
        logits[row + rng() % vocab] = 6.0f + 0.5f * static_cast<float>(i);
      cases.push_back(p);
      params.push_back(device_sampling_row(p, draw));
    }
  }
  const Sampled got = sample_on_emulated_device(logits, vocab, params, 2);
  for (size_t r = 0; r < cases.size(); ++r) {
    EXPECT_EQ(got.ids[r],
              sample_token(logits.data() + r * vocab, vocab, cases[r], params[r].uniform))
        << "row " << r;
  }
}

// Random filters over rows of integer logits (few distinct values), masked tokens or outliers;
// each row twice, by one block and by a cluster of two sharing it, which must give the same token
// (the tallies are exact in any order of the threads' and the slices' additions).
TEST(SamplingEmulationTest, RandomFiltersRepeatTheHostsToken) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t rows = 4;
  const int64_t vocab = 1500;
  std::vector<float> logits(rows * vocab);
  std::vector<SamplingParams> all(rows);
  std::vector<SamplingRow> params;
  for (int64_t r = 0; r < rows; ++r) {
    std::normal_distribution<float> normal(0.0f, 0.1f + 5.0f * static_cast<float>(uniform(rng)));
    for (int64_t i = 0; i < vocab; ++i) {
      float v = normal(rng);
      if (r % 4 == 0) v = std::round(v);
      if (r % 4 == 1 && rng() % 5 == 0) v = -INFINITY;
      if (r % 4 == 2 && rng() % 50 == 0) v += 20.0f;
      logits[r * vocab + i] = v;
    }
    SamplingParams& p = all[r];
    p.temperature = 0.2 + 2.0 * uniform(rng);
    if (rng() % 2) p.top_k = 1 + static_cast<int64_t>(rng() % vocab);
    if (rng() % 2) p.top_p = uniform(rng);
    if (rng() % 3 == 0) p.min_p = 0.3 * uniform(rng);
    params.push_back(device_sampling_row(p, uniform(rng)));
  }
  // Alone on a row, and a row shared by two blocks: the same token.
  const Sampled first = sample_on_emulated_device(logits, vocab, params, 1);
  const Sampled second = sample_on_emulated_device(logits, vocab, params, 2);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(first.ids[r],
              sample_token(logits.data() + r * vocab, vocab, all[r], params[r].uniform))
        << "row " << r;
    EXPECT_EQ(second.ids[r], first.ids[r]) << "row " << r;
  }
}

// Each row judges one draft as accept_drafts() does with one draft: kept or not, and the token
// drawn in its place. Drafts come from the drafter's distribution, or are planted anywhere.
TEST(SamplingEmulationTest, JudgesDraftsAsTheHostDoes) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  const std::vector<SamplingParams> all = {filters()[0], filters()[1], filters()[2], filters()[4],
                                           filters()[7]};
  const int64_t rows = static_cast<int64_t>(all.size());
  const int64_t vocab = 1000;
  const std::vector<float> target = sampling_logits(rows, vocab, rng);
  std::vector<float> drafter(target);
  for (float& v : drafter) {
    if (std::isfinite(v)) v += noise(rng);
  }
  std::vector<SamplingRow> params;
  std::vector<int32_t> drafts;
  std::vector<std::vector<double>> draws;
  for (int64_t r = 0; r < rows; ++r) {
    const SamplingParams& p = all[r];
    const bool planted = p.greedy() || r % 3 == 0;
    drafts.push_back(planted ? static_cast<int32_t>(rng() % vocab)
                             : sample_token(drafter.data() + r * vocab, vocab, p, uniform(rng)));
    draws.push_back({uniform(rng), uniform(rng)});  // judging the draft; drawing after it
    SamplingRow row = device_sampling_row(p, draws[r][1]);
    row.draft = drafts[r];
    row.draft_row = r;
    row.judge = draws[r][0];
    params.push_back(row);
  }
  const Sampled got = sample_on_emulated_device(target, vocab, params, 2, drafter);
  int kept = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* p_rows[] = {target.data() + r * vocab, target.data() + r * vocab};
    const float* q_rows[] = {drafter.data() + r * vocab};
    const Acceptance expected = accept_drafts(
        p_rows, q_rows, std::span<const int32_t>(&drafts[r], 1), vocab, all[r], draws[r]);
    EXPECT_EQ(got.kept[r], expected.accepted) << "case " << r;
    if (expected.accepted == 0) {
      EXPECT_EQ(got.ids[r], expected.next) << "case " << r;
    }
    kept += got.kept[r];
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, rows);
}

}  // namespace
}  // namespace pagoda
