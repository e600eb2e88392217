#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "ops/cpu/ops.h"

namespace pagoda {

Tensor compute_logprobs(const Tensor& logits) {
  Tensor out = Tensor::empty(logits.shape(), DType::kF32);
  cpu::log_softmax(logits.contiguous(), out);
  return out;
}

std::vector<TokenLogprob> top_logprobs(const float* row, int64_t vocab, int64_t k) {
  k = std::min(k, vocab);
  std::vector<int32_t> ids(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    ids[i] = static_cast<int32_t>(i);
  auto better = [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  std::vector<TokenLogprob> top;
  for (int64_t i = 0; i < k; ++i)
    top.push_back({ids[i], row[ids[i]]});
  return top;
}

std::vector<SampledToken> sample_greedy(const Tensor& logprobs, int64_t num_top) {
  const int64_t rows = logprobs.size(0);
  const int64_t vocab = logprobs.size(1);
  std::vector<SampledToken> out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logprobs.data<float>() + r * vocab;
    int32_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (row[i] > row[best]) best = static_cast<int32_t>(i);
    }
    out.push_back({best, row[best], top_logprobs(row, vocab, num_top)});
  }
  return out;
}

double SamplerRng::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

void apply_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output, const SamplingParams& params) {
  if (params.repetition_penalty != 1.0) {
    std::vector<bool> seen(vocab, false);
    for (int32_t id : prompt)
      seen[id] = true;
    for (int32_t id : output)
      seen[id] = true;
    const float penalty = static_cast<float>(params.repetition_penalty);
    for (int64_t i = 0; i < vocab; ++i) {
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / penalty : logits[i] * penalty;
    }
  }
  if (params.frequency_penalty != 0.0 || params.presence_penalty != 0.0) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : output)
      ++counts[id];
    for (const auto& [id, count] : counts) {
      logits[id] -= static_cast<float>(params.frequency_penalty * count + params.presence_penalty);
    }
  }
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     SamplerRng& rng) {
  return sample_token(logits, vocab, params, params.greedy() ? 0.0 : rng.uniform());
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     double uniform) {
  if (params.greedy()) {
    int32_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    }
    return best;
  }
  // Probabilities of logits / temperature, in double.
  std::vector<double> probs(vocab);
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    max = std::max(max, logits[i] / params.temperature);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i)
    total += probs[i] = std::exp(logits[i] / params.temperature - max);
  for (double& p : probs)
    p /= total;
  // Most likely first (ties by lower id), so every filter keeps a prefix.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  });
  int64_t keep = vocab;
  if (params.min_p > 0.0) {
    const double floor = params.min_p * probs[order[0]];
    keep = std::max<int64_t>(
        1, std::count_if(probs.begin(), probs.end(), [&](double p) { return p >= floor; }));
  }
  if (params.top_k > 0) keep = std::min(keep, params.top_k);
  if (params.top_p < 1.0) {
    double mass = 0;
    for (int64_t i = 0; i < keep; ++i)
      mass += probs[order[i]];
    double cumulative = 0;
    int64_t kept = 0;
    while (kept < keep && cumulative < params.top_p * mass)
      cumulative += probs[order[kept++]];
    keep = std::max<int64_t>(1, kept);
  }
  double mass = 0;
  for (int64_t i = 0; i < keep; ++i)
    mass += probs[order[i]];
  double target = uniform * mass;
  for (int64_t i = 0; i < keep; ++i) {
    target -= probs[order[i]];
    if (target < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace pagoda
