// Turns logits into tokens and log-probabilities: greedy, or penalties, temperature, min-p, top-k
// and top-p followed by a seeded draw.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "engine/sampling_params.h"

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

// A request's random stream. Seeded requests start from their seed, so their draws do not depend
// on what else is in the batch.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : state_(seed) {}
  double uniform();  // in [0, 1)

 private:
  uint64_t state_;
};

// Repetition (tokens of the prompt or the output), frequency and presence (tokens of the output)
// penalties on one row of logits, in place.
void apply_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output, const SamplingParams& params);

// One token from a row of (penalised) logits: the argmax when greedy; else softmax of
// logits / temperature, min-p, top-k and top-p filtering, and a draw from what remains.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     SamplerRng& rng);
// The same with the draw given: `uniform` in [0, 1) picks the token (unused when greedy). The
// version above draws it from rng only when the request is not greedy.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     double uniform);

}  // namespace pagoda
