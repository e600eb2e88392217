// Cases shared by the tests of the GPU sampler (on a GPU, and emulated on the host): each filter
// alone and together, and logits with ties and impossible tokens.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "engine/sampling_params.h"
#include "ops/sampling_row.h"

namespace pagoda {

struct SamplingCase {
  SamplingParams params;
  const char* name;
};

inline std::vector<SamplingCase> sampling_cases() {
  return {
      {{.temperature = 0.0}, "greedy"},
      {{.temperature = 1.0}, "temperature 1"},
      {{.temperature = 0.7, .top_k = 50}, "top-k 50"},
      {{.temperature = 2.0, .top_k = 1}, "top-k 1"},
      {{.temperature = 1.3, .top_p = 0.9}, "top-p 0.9"},
      {{.temperature = 1.0, .top_p = 1e-4}, "top-p tiny"},
      {{.temperature = 1.0, .min_p = 0.05}, "min-p 0.05"},
      {{.temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.02}, "all filters"},
  };
}

// Row r of a [rows, vocab] batch: normal logits; odd rows rounded to halves, so many tokens tie
// (-0 beside +0 among them), and every seventh token impossible in every fourth row.
inline std::vector<float> sampling_logits(int64_t rows, int64_t vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(rows * vocab);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      float v = normal(rng);
      if (r % 2 == 1) v = std::round(v * 2.0f) / 2.0f;
      if (r % 4 == 3 && i % 7 == 3) v = -INFINITY;
      logits[r * vocab + i] = v;
    }
  }
  return logits;
}

// A request's parameters as a device sampling row with the draw `uniform`.
inline SamplingRow device_sampling_row(const SamplingParams& p, double uniform) {
  return {.temperature = p.temperature,
          .top_p = p.top_p,
          .min_p = p.min_p,
          .uniform = uniform,
          .top_k = p.top_k};
}

}  // namespace pagoda
