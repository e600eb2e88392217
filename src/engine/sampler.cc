#include "engine/sampler.h"

#include <algorithm>

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

}  // namespace pagoda
