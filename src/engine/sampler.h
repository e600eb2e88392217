// Turns a step's logits into tokens and log-probabilities: greedy, or penalties, min-tokens
// masking, temperature, min-p, top-k and top-p followed by a seeded draw. The Sampler decides per
// step whether the tokens are drawn where the logits are (a GPU) or on the host.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "ops/sampling_row.h"

namespace pagoda {

struct SamplerConfig {
  std::vector<int64_t> eos_token_ids;  // ruled out with the stop tokens before min_tokens
};

// Per step: prepare(chunks) says which rows of logits each scheduled chunk needs and where its
// tokens will be drawn; sample(logits, first_rows) draws them. A chunk may take any number of
// trailing rows (every prompt row for prompt log-probabilities; one row to sample a token).
class Sampler {
 public:
  explicit Sampler(SamplerConfig config);

  // Plans the step. The tokens are drawn where the logits are when `logits_on_device` and every
  // row that samples depends on its logits alone (no penalties, alternatives, prompt
  // log-probabilities or pending min_tokens); those rows' random draws are taken now, in chunk
  // order, as the host path would take them.
  void prepare(std::span<const ScheduledChunk> chunks, bool logits_on_device);
  // Per chunk of the last prepare(): how many of its last tokens' logits rows it needs.
  std::span<const int64_t> logits_rows() const { return logits_rows_; }
  // Samples logits [rows, vocab] f32 (on a GPU or the host), where chunk i's rows start at
  // first_rows[i]. Records prompt log-probabilities in their requests. Returns, per chunk, the
  // tokens it sampled: none for a chunk that ends inside its request's known tokens, one for a
  // decode, and for a chunk that verifies drafts the drafts it kept and the token after them
  // (engine/spec_acceptance.h).
  std::span<const std::vector<SampledToken>> sample(const Tensor& logits,
                                                    std::span<const int64_t> first_rows);

 private:
  // sample() where on_device_: the tokens drawn, and drafts judged, on the device.
  void sample_on_device(const Tensor& logits, std::span<const int64_t> first_rows);
  // The request's next token from its last row of raw logits and log-probabilities.
  SampledToken sample_on_host(Request& request, const float* logits, const float* logprobs,
                              int64_t vocab);
  // The tokens a chunk's 1 + num_drafts rows of logits and log-probabilities keep.
  std::vector<SampledToken> verify(const ScheduledChunk& chunk, const float* logits,
                                   const float* logprobs, int64_t vocab);
  // Log-probabilities of the prompt tokens that `rows` rows, from position first_position on,
  // predict.
  void record_prompt_logprobs(Request& request, int64_t first_position, const float* logprobs,
                              int64_t rows, int64_t vocab);

  SamplerConfig config_;
  std::vector<ScheduledChunk> chunks_;  // of the step being sampled
  std::vector<int64_t> logits_rows_;
  std::vector<bool> samples_;  // per chunk: whether its last row draws a token
  bool on_device_ = false;
  std::vector<std::vector<SamplingRow>> device_rows_;  // per chunk and logits row, with on_device_
  std::vector<Tensor> device_drafts_;  // the drafter's rows the device rows judge against
  std::vector<std::vector<SampledToken>> tokens_;
  std::vector<float> processed_;  // scratch: rows of processed logits
};

// A device row that samples as `params` do with the draw `uniform`; the argmax for greedy params.
SamplingRow sampling_row(const SamplingParams& params, double uniform);

// Log-softmax of logits [rows, vocab] (a new tensor).
Tensor compute_logprobs(const Tensor& logits);

// The k highest entries of one row of log-probabilities, ties broken by the lower token id.
std::vector<TokenLogprob> top_logprobs(const float* row, int64_t vocab, int64_t k);

// The argmax of each row (the lowest id among equal maxima) with its log-probability and the top
// `num_top` alternatives.
std::vector<SampledToken> sample_greedy(const Tensor& logprobs, int64_t num_top);

// Whether a request samples from processed logits: with penalties, or min_tokens still pending.
bool processes_logits(const Request& request);
// One row of raw logits as the request samples from it after `output` (its output tokens, or those
// and the drafts before the row): penalties, and the stop tokens (`eos_token_ids` and the
// request's stop_token_ids) ruled out while fewer than min_tokens came before. Writes vocab floats
// to `out`.
void process_logits(const Request& request, std::span<const int64_t> eos_token_ids,
                    const float* logits, int64_t vocab, std::span<const int32_t> output,
                    float* out);

// Repetition (tokens of the prompt or the output), frequency and presence (tokens of the output)
// penalties on one row of logits, in place.
void apply_penalties(float* logits, int64_t vocab, std::span<const int32_t> prompt,
                     std::span<const int32_t> output, const SamplingParams& params);

// What a sampling request draws from: softmax of logits / temperature, then min-p, top-k and top-p,
// which keep the `keep` likeliest tokens of `order` (ties by lower id).
struct FilteredDistribution {
  std::vector<double> probs;   // per token, before filtering
  std::vector<int32_t> order;  // tokens, most likely first
  int64_t keep = 0;
  double mass = 0;  // of the kept tokens

  // The token's probability after filtering (0 when filtered out).
  double probability(int32_t token) const;
  // The token that `uniform` in [0, 1) falls on, walking the kept tokens in order.
  int32_t draw(double uniform) const;
};
// Not for greedy params (temperature 0).
FilteredDistribution filter_distribution(const float* logits, int64_t vocab,
                                         const SamplingParams& params);

// One token from a row of (penalised) logits: the argmax when greedy; else softmax of
// logits / temperature, min-p, top-k and top-p filtering, and a draw from what remains.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     SamplerRng& rng);
// The same with the draw given: `uniform` in [0, 1) picks the token (unused when greedy). The
// version above draws it from rng only when the request is not greedy.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     double uniform);

}  // namespace pagoda
