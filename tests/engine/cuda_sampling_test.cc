// Sampling on the GPU against the host sampler: for the same logits, parameters and draw, the
// device must pick the token sample_token() picks, and report its log-softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/device.h"
#include "engine/sampler.h"
#include "engine/spec_acceptance.h"
#include "ops/cuda/ops.h"
#include "tests/engine/sampling_cases.h"

namespace pagoda {
namespace {

// Each case as a device sampling row, all with the draw `draw`.
std::vector<SamplingRow> device_rows(const std::vector<SamplingCase>& all, double draw) {
  std::vector<SamplingRow> rows;
  for (const SamplingCase& c : all)
    rows.push_back(device_sampling_row(c.params, draw));
  return rows;
}

TEST(CudaSamplingTest, PicksTheHostSamplersToken) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<SamplingCase> all = sampling_cases();
  for (int64_t vocab : {5, 1000, 151936, 262144}) {
    // Every case on its own row, several draws each, in one call per draw.
    const int64_t rows = static_cast<int64_t>(all.size());
    const std::vector<float> logits = sampling_logits(rows, vocab, rng);
    Tensor host_logits = Tensor::empty({rows, vocab}, DType::kF32);
    std::copy(logits.begin(), logits.end(), host_logits.data<float>());
    const Tensor logprobs = compute_logprobs(host_logits);
    const Tensor device_logits = host_logits.to(Device::cuda());
    for (double draw : {0.0, uniform(rng), uniform(rng), uniform(rng), 0.999999}) {
      const std::vector<SamplingRow> params = device_rows(all, draw);
      Tensor ids = Tensor::empty({rows}, DType::kI32, Device::cuda());
      Tensor token_logprobs = Tensor::empty({rows}, DType::kF32, Device::cuda());
      ids.fill(-1.0);
      token_logprobs.fill(NAN);
      cuda::sample(device_logits, params, ids, token_logprobs);
      const Tensor got_ids = ids.to(Device::cpu());
      const Tensor got_logprobs = token_logprobs.to(Device::cpu());
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = logits.data() + r * vocab;
        const int32_t expected = sample_token(row, vocab, all[r].params, draw);
        const int32_t got = got_ids.data<int32_t>()[r];
        ASSERT_EQ(got, expected) << all[r].name << ", vocab " << vocab << ", draw " << draw;
        EXPECT_NEAR(got_logprobs.data<float>()[r], logprobs.data<float>()[r * vocab + got], 1e-4)
            << all[r].name << ", vocab " << vocab;
      }
    }
  }
}

// Logits that crowd the device sampler's bins (linear in the logit, spanning the row's range): one
// finite logit far below the rest stretches the range, so the rest, distinct values in a narrow
// band, share one bin, which the device must narrow by the digits of their sort keys before it can
// order them.
TEST(CudaSamplingTest, NarrowsCrowdedBins) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(13);
  std::normal_distribution<float> narrow(0.0f, 0.01f);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<SamplingCase> all = sampling_cases();
  const int64_t rows = static_cast<int64_t>(all.size());
  for (int64_t vocab : {5000, 151936}) {
    std::vector<float> logits(rows * vocab);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < vocab; ++i)
        logits[r * vocab + i] = narrow(rng);
      logits[r * vocab + r] = -1e30f;
    }
    Tensor host_logits = Tensor::empty({rows, vocab}, DType::kF32);
    std::copy(logits.begin(), logits.end(), host_logits.data<float>());
    const Tensor device_logits = host_logits.to(Device::cuda());
    for (double draw : {0.0, uniform(rng), uniform(rng), 0.999999}) {
      const std::vector<SamplingRow> params = device_rows(all, draw);
      Tensor ids = Tensor::empty({rows}, DType::kI32, Device::cuda());
      Tensor token_logprobs = Tensor::empty({rows}, DType::kF32, Device::cuda());
      cuda::sample(device_logits, params, ids, token_logprobs);
      const Tensor got = ids.to(Device::cpu());
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t expected =
            sample_token(logits.data() + r * vocab, vocab, all[r].params, draw);
        ASSERT_EQ(got.data<int32_t>()[r], expected)
            << all[r].name << ", vocab " << vocab << ", draw " << draw;
      }
    }
  }
}

TEST(CudaSamplingTest, ManyRowsOfOneCaseDrawApart) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // 200 rows of pure temperature sampling: each row's draw must walk its own row's order.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t rows = 200;
  const int64_t vocab = 3000;
  const std::vector<float> logits = sampling_logits(rows, vocab, rng);
  Tensor host_logits = Tensor::empty({rows, vocab}, DType::kF32);
  std::copy(logits.begin(), logits.end(), host_logits.data<float>());
  std::vector<SamplingRow> params;
  for (int64_t r = 0; r < rows; ++r)
    params.push_back({.temperature = 0.9, .uniform = uniform(rng)});
  Tensor ids = Tensor::empty({rows}, DType::kI32, Device::cuda());
  Tensor token_logprobs = Tensor::empty({rows}, DType::kF32, Device::cuda());
  cuda::sample(host_logits.to(Device::cuda()), params, ids, token_logprobs);
  const Tensor got = ids.to(Device::cpu());
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t expected =
        sample_token(logits.data() + r * vocab, vocab, {.temperature = 0.9}, params[r].uniform);
    ASSERT_EQ(got.data<int32_t>()[r], expected) << "row " << r;
  }
}

// Rows that judge drafts: for the same target and drafter logits, drafts and draws, the device
// keeps the drafts accept_drafts() keeps and gives the same token after them. Drafts come from
// the drafter's filtered distribution, or are planted anywhere (also where a filter cuts them).
TEST(CudaSamplingTest, JudgesDraftsAsTheHostDoes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(13);
  const std::vector<SamplingCase> all = sampling_cases();
  constexpr int64_t kDrafts = 3;
  for (int64_t vocab : {5, 1000, 151936}) {
    for (int trial = 0; trial < 4; ++trial) {
      // One request per case: its 1 + K target rows and K drafter rows.
      const int64_t requests = static_cast<int64_t>(all.size());
      const int64_t rows = requests * (kDrafts + 1);
      const std::vector<float> target = sampling_logits(rows, vocab, rng);
      // The drafter's rows: the target's, nudged, so drafts are often but not always kept.
      std::vector<float> drafter(requests * kDrafts * vocab);
      std::normal_distribution<float> nudge(0.0f, 1.0f);
      for (int64_t r = 0; r < requests; ++r) {
        for (int64_t j = 0; j < kDrafts; ++j) {
          const float* from = target.data() + (r * (kDrafts + 1) + j) * vocab;
          float* to = drafter.data() + (r * kDrafts + j) * vocab;
          for (int64_t t = 0; t < vocab; ++t)
            to[t] = std::isinf(from[t]) ? from[t] : from[t] + nudge(rng);
        }
      }
      std::vector<SamplingRow> params;
      std::vector<std::vector<int32_t>> drafts(requests);
      std::vector<std::vector<double>> draws(requests);
      SamplerRng draw_rng(static_cast<uint64_t>(vocab * 10 + trial));
      for (int64_t r = 0; r < requests; ++r) {
        const SamplingParams& p = all[r].params;
        draws[r] = acceptance_draws(p, kDrafts, draw_rng);
        for (int64_t j = 0; j < kDrafts; ++j) {
          const float* q = drafter.data() + (r * kDrafts + j) * vocab;
          const bool planted = (trial + j) % 3 == 2;
          drafts[r].push_back(planted ? static_cast<int32_t>(rng() % vocab)
                                      : sample_token(q, vocab, p, draw_rng));
        }
        for (int64_t j = 0; j <= kDrafts; ++j) {
          SamplingRow row = sampling_row(p, draws[r].empty() ? 0.0 : draws[r][kDrafts]);
          if (j < kDrafts) {
            row.draft = drafts[r][j];
            if (!p.greedy()) {
              row.judge = draws[r][j];
              row.draft_row = r * kDrafts + j;
            }
          }
          params.push_back(row);
        }
      }
      Tensor host_target = Tensor::empty({rows, vocab}, DType::kF32);
      std::copy(target.begin(), target.end(), host_target.data<float>());
      Tensor host_drafter = Tensor::empty({requests * kDrafts, vocab}, DType::kF32);
      std::copy(drafter.begin(), drafter.end(), host_drafter.data<float>());
      Tensor ids = Tensor::empty({rows}, DType::kI32, Device::cuda());
      Tensor logprobs = Tensor::empty({rows}, DType::kF32, Device::cuda());
      Tensor kept = Tensor::empty({rows}, DType::kI32, Device::cuda());
      cuda::sample(host_target.to(Device::cuda()), params, ids, logprobs, kept,
                   host_drafter.to(Device::cuda()));
      const Tensor got_ids = ids.to(Device::cpu());
      const Tensor got_kept = kept.to(Device::cpu());
      int64_t total_kept = 0;
      for (int64_t r = 0; r < requests; ++r) {
        std::vector<const float*> target_rows, draft_rows;
        for (int64_t j = 0; j <= kDrafts; ++j)
          target_rows.push_back(target.data() + (r * (kDrafts + 1) + j) * vocab);
        for (int64_t j = 0; j < kDrafts; ++j)
          draft_rows.push_back(drafter.data() + (r * kDrafts + j) * vocab);
        const Acceptance expected =
            accept_drafts(target_rows, draft_rows, drafts[r], vocab, all[r].params, draws[r]);
        const int64_t first = r * (kDrafts + 1);
        int64_t accepted = 0;
        while (accepted < kDrafts && got_kept.data<int32_t>()[first + accepted] != 0)
          ++accepted;
        ASSERT_EQ(accepted, expected.accepted) << all[r].name << ", vocab " << vocab;
        ASSERT_EQ(got_ids.data<int32_t>()[first + accepted], expected.next)
            << all[r].name << ", vocab " << vocab << ", " << accepted << " kept";
        for (int64_t j = 0; j < accepted; ++j)
          ASSERT_EQ(got_ids.data<int32_t>()[first + j], drafts[r][j]);
        total_kept += accepted;
      }
      // Neither nothing nor everything kept: both branches of the rule ran.
      EXPECT_GT(total_kept, 0) << "vocab " << vocab;
      EXPECT_LT(total_kept, requests * kDrafts) << "vocab " << vocab;
    }
  }
}

}  // namespace
}  // namespace pagoda
