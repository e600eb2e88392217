// Turns logits into tokens and log-probabilities. Greedy for now; sampling parameters arrive with
// the engine loop.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace pagoda {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // the k most likely tokens, most likely first
};

// Log-softmax of logits [rows, vocab] (a new tensor).
Tensor compute_logprobs(const Tensor& logits);

// The k highest entries of one row of log-probabilities, ties broken by the lower token id.
std::vector<TokenLogprob> top_logprobs(const float* row, int64_t vocab, int64_t k);

// The argmax of each row (the lowest id among equal maxima) with its log-probability and the top
// `num_top` alternatives.
std::vector<SampledToken> sample_greedy(const Tensor& logprobs, int64_t num_top);

}  // namespace pagoda
