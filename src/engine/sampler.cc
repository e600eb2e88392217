#include "engine/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "engine/spec_acceptance.h"
#include "ops/cpu/ops.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

// Whether a request's next token depends on its logits alone: no penalties, alternatives or
// prompt log-probabilities, and no minimum length still ruling out EOS.
bool samples_from_logits(const Request& request) {
  const SamplingParams& params = request.params;
  return !processes_logits(request) && params.logprobs == 0 && !params.prompt_logprobs.has_value();
}

// Whether a request's drafts can be judged on the device: greedy ones by the argmax of each row;
// sampling ones when the drafter's rows they were drawn from are there too.
bool judges_on_device(const Request& request, int64_t num_drafts) {
  if (num_drafts == 0 || request.params.greedy()) return true;
  return static_cast<int64_t>(request.draft_logits.size()) >= num_drafts &&
         std::none_of(request.draft_logits.begin(), request.draft_logits.begin() + num_drafts,
                      [](const Tensor& row) { return row.device().is_cpu(); });
}

}  // namespace

Sampler::Sampler(SamplerConfig config) : config_(std::move(config)) {}

void Sampler::prepare(std::span<const ScheduledChunk> chunks, bool logits_on_device) {
  chunks_.assign(chunks.begin(), chunks.end());
  logits_rows_.clear();
  samples_.clear();
  on_device_ = logits_on_device;
  for (const ScheduledChunk& chunk : chunks) {
    const Request& request = *chunk.request;
    const bool prompt_rows = request.prompt_logprob_rows(chunk.first);
    logits_rows_.push_back(prompt_rows ? chunk.num_tokens : 1 + chunk.num_drafts);
    samples_.push_back(chunk.first + chunk.num_tokens >= request.num_tokens());
    on_device_ = on_device_ && !prompt_rows && samples_from_logits(request) &&
                 judges_on_device(request, chunk.num_drafts);
  }
  // Per chunk, a row for each of its logits rows; a verifying chunk's rows judge its drafts with
  // the draws the host would take (engine/spec_acceptance.h).
  device_rows_.clear();
  device_drafts_.clear();
  for (size_t i = 0; i < chunks.size() && on_device_; ++i) {
    const ScheduledChunk& chunk = chunks[i];
    Request& request = *chunk.request;
    const SamplingParams& params = request.params;
    const int64_t k = chunk.num_drafts;
    if (!samples_[i]) {
      device_rows_.emplace_back(logits_rows_[i]);
      continue;
    }
    const std::vector<double> draws = acceptance_draws(params, k, request.rng);
    std::vector<SamplingRow> rows(k + 1, sampling_row(params, draws.empty() ? 0.0 : draws[k]));
    for (int64_t j = 0; j < k; ++j) {
      rows[j].draft = request.draft_token_ids[j];
      if (params.greedy()) continue;
      rows[j].judge = draws[j];
      rows[j].draft_row = static_cast<int64_t>(device_drafts_.size());
      device_drafts_.push_back(request.draft_logits[j]);
    }
    device_rows_.push_back(std::move(rows));
  }
}

std::span<const std::vector<SampledToken>> Sampler::sample(const Tensor& logits,
                                                           std::span<const int64_t> first_rows) {
  PAGODA_CHECK(first_rows.size() == chunks_.size(), "{} first rows for {} chunks",
               first_rows.size(), chunks_.size());
  tokens_.assign(chunks_.size(), {});
  if (on_device_) {
    sample_on_device(logits, first_rows);
    return tokens_;
  }
  const Tensor host_logits = logits.device().is_cpu() ? logits : logits.to(Device::cpu());
  const Tensor logprobs = compute_logprobs(host_logits);
  const int64_t vocab = logprobs.size(1);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    Request& request = *chunks_[i].request;
    const int64_t rows = logits_rows_[i];
    if (request.params.prompt_logprobs) {
      record_prompt_logprobs(request, chunks_[i].first + chunks_[i].num_tokens - rows,
                             logprobs.data<float>() + first_rows[i] * vocab, rows, vocab);
    }
    if (!samples_[i]) continue;
    const int64_t first = first_rows[i] * vocab;
    if (chunks_[i].num_drafts > 0) {
      tokens_[i] = verify(chunks_[i], host_logits.data<float>() + first,
                          logprobs.data<float>() + first, vocab);
      continue;
    }
    const int64_t last = first + (rows - 1) * vocab;
    tokens_[i] = {sample_on_host(request, host_logits.data<float>() + last,
                                 logprobs.data<float>() + last, vocab)};
  }
  return tokens_;
}

void Sampler::sample_on_device(const Tensor& logits, std::span<const int64_t> first_rows) {
  const int64_t count = logits.size(0);
  std::vector<SamplingRow> rows(count);
  for (size_t i = 0; i < chunks_.size(); ++i)
    std::copy(device_rows_[i].begin(), device_rows_[i].end(), rows.begin() + first_rows[i]);
  // The drafter's rows that sampling requests' drafts are judged against, gathered.
  Tensor drafts;
  if (!device_drafts_.empty()) {
    drafts = Tensor::uninitialized({static_cast<int64_t>(device_drafts_.size()), logits.size(1)},
                                   DType::kF32, logits.device());
    for (size_t d = 0; d < device_drafts_.size(); ++d)
      drafts.select(0, static_cast<int64_t>(d)).copy_from(device_drafts_[d]);
  }
  // Ids, log-probabilities and kept flags side by side, so one copy brings them all back.
  const Tensor sampled = Tensor::uninitialized({3, count}, DType::kI32, logits.device());
  ops::sample(logits, rows, sampled.select(0, 0), sampled.select(0, 1).reinterpret(DType::kF32),
              sampled.select(0, 2), drafts);
  device_drafts_.clear();
  const Tensor host = sampled.to(Device::cpu());
  const auto* ids = host.select(0, 0).data<int32_t>();
  const auto* logprobs = host.select(0, 1).reinterpret(DType::kF32).data<float>();
  const auto* kept = host.select(0, 2).data<int32_t>();
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (!samples_[i]) continue;
    // The drafts up to the first row that rejects its draft, then that row's token (a
    // correction), or the last row's when all were kept (the bonus).
    const int64_t first = first_rows[i];
    int64_t j = 0;
    while (j < chunks_[i].num_drafts && kept[first + j] != 0) {
      tokens_[i].push_back({ids[first + j], logprobs[first + j], {}});
      ++j;
    }
    tokens_[i].push_back({ids[first + j], logprobs[first + j], {}});
  }
}

std::vector<SampledToken> Sampler::verify(const ScheduledChunk& chunk, const float* logits,
                                          const float* logprobs, int64_t vocab) {
  Request& request = *chunk.request;
  const int64_t k = chunk.num_drafts;
  const std::span<const int32_t> drafts = std::span(request.draft_token_ids).first(k);
  // Row j follows the request's output and drafts 0..j-1: with penalties, or min_tokens pending,
  // the target's rows are judged as processed with that history.
  const bool processed = processes_logits(request);
  std::vector<int32_t> history;  // the output, then the drafts
  if (processed) {
    processed_.resize((k + 1) * vocab);
    const std::span<const int32_t> output = request.output_token_ids();
    history.assign(output.begin(), output.end());
    history.insert(history.end(), drafts.begin(), drafts.end());
  }
  std::vector<const float*> target_rows;
  for (int64_t j = 0; j <= k; ++j) {
    const float* row = logits + j * vocab;
    if (processed) {
      float* out = processed_.data() + j * vocab;
      process_logits(request, config_.eos_token_ids, row, vocab,
                     std::span(history).first(history.size() - (k - j)), out);
      row = out;
    }
    target_rows.push_back(row);
  }
  std::vector<Tensor> host_drafts;
  std::vector<const float*> draft_rows;
  if (!request.params.greedy()) {
    PAGODA_CHECK(static_cast<int64_t>(request.draft_logits.size()) >= k,
                 "request {} has drafter logits for {} of {} drafts", request.id,
                 request.draft_logits.size(), k);
    for (int64_t j = 0; j < k; ++j) {
      const Tensor& row = request.draft_logits[j];
      host_drafts.push_back(row.device().is_cpu() ? row : row.to(Device::cpu()));
      draft_rows.push_back(host_drafts.back().data<float>());
    }
  }
  const Acceptance acceptance =
      accept_drafts(target_rows, draft_rows, drafts, vocab, request.params,
                    acceptance_draws(request.params, k, request.rng));
  // Every token with the target's log-probabilities at its row.
  std::vector<SampledToken> tokens;
  auto add = [&](int64_t row, int32_t token) {
    const float* row_logprobs = logprobs + row * vocab;
    tokens.push_back(
        {token, row_logprobs[token], top_logprobs(row_logprobs, vocab, request.params.logprobs)});
  };
  for (int64_t j = 0; j < acceptance.accepted; ++j)
    add(j, drafts[j]);
  add(acceptance.accepted, acceptance.next);
  return tokens;
}

// Row j, at position first_position + j, predicts token first_position + j + 1.
void Sampler::record_prompt_logprobs(Request& request, int64_t first_position,
                                     const float* logprobs, int64_t rows, int64_t vocab) {
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t predicted = first_position + j + 1;
    if (predicted >= request.num_prompt_tokens ||
        static_cast<int64_t>(request.prompt_logprobs.size()) != predicted) {
      continue;  // past the prompt, or recorded before a preemption
    }
    const float* row = logprobs + j * vocab;
    const float logprob = row[request.token_ids[predicted]];
    request.prompt_logprobs.push_back(
        Logprobs{logprob, top_logprobs(row, vocab, *request.params.prompt_logprobs),
                 1 + std::count_if(row, row + vocab, [&](float x) { return x > logprob; })});
  }
}

SampledToken Sampler::sample_on_host(Request& request, const float* logits, const float* logprobs,
                                     int64_t vocab) {
  const SamplingParams& params = request.params;
  processed_.resize(vocab);
  process_logits(request, config_.eos_token_ids, logits, vocab, request.output_token_ids(),
                 processed_.data());
  const int32_t token = sample_token(processed_.data(), vocab, params, request.rng);
  return {token, logprobs[token], top_logprobs(logprobs, vocab, params.logprobs)};
}

SamplingRow sampling_row(const SamplingParams& params, double uniform) {
  if (params.greedy()) return {};
  return {.temperature = params.sampling_temperature(),
          .top_p = params.top_p,
          .min_p = params.min_p,
          .uniform = uniform,
          .top_k = std::max<int64_t>(params.top_k, 0)};
}

Tensor compute_logprobs(const Tensor& logits) {
  Tensor out = Tensor::empty(logits.shape(), DType::kF32);
  cpu::log_softmax(logits.contiguous(), out);
  return out;
}

std::vector<TokenLogprob> top_logprobs(const float* row, int64_t vocab, int64_t k) {
  k = std::min(k, vocab);
  if (k <= 0) return {};  // the usual case: no vocabulary-wide index to build
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

bool processes_logits(const Request& request) {
  return request.params.has_penalties() || request.num_output_tokens() < request.params.min_tokens;
}

void process_logits(const Request& request, std::span<const int64_t> eos_token_ids,
                    const float* logits, int64_t vocab, std::span<const int32_t> output,
                    float* out) {
  const SamplingParams& params = request.params;
  std::copy(logits, logits + vocab, out);
  apply_penalties(out, vocab, request.prompt_token_ids(), output, params);
  if (static_cast<int64_t>(output.size()) < params.min_tokens) {
    for (int64_t id : eos_token_ids) {
      if (id >= 0 && id < vocab) out[id] = -INFINITY;
    }
    for (int32_t id : params.stop_token_ids)
      out[id] = -INFINITY;
  }
}

void apply_penalties(float* logits, int64_t vocab, std::span<const int32_t> prompt,
                     std::span<const int32_t> output, const SamplingParams& params) {
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

FilteredDistribution filter_distribution(const float* logits, int64_t vocab,
                                         const SamplingParams& params) {
  FilteredDistribution out;
  // Probabilities of logits / temperature, in double.
  std::vector<double>& probs = out.probs;
  probs.resize(vocab);
  // A NaN logit (a model gone wrong) counts as impossible, an infinite one as the largest double;
  // if every one is impossible, all are equally likely. Either way no NaN reaches the sort below,
  // whose order it would break.
  const double temperature = params.sampling_temperature();
  const auto scaled = [&](int64_t i) -> double {
    if (std::isnan(logits[i])) return -INFINITY;
    return std::min(static_cast<double>(logits[i]) / temperature, DBL_MAX);
  };
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    max = std::max(max, scaled(i));
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i)
    total += probs[i] = max == -INFINITY ? 1.0 : std::exp(scaled(i) - max);
  for (double& p : probs)
    p /= total;
  // Most likely first (ties by lower id), so every filter keeps a prefix.
  std::vector<int32_t>& order = out.order;
  order.resize(vocab);
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
  out.keep = keep;
  for (int64_t i = 0; i < keep; ++i)
    out.mass += probs[order[i]];
  return out;
}

double FilteredDistribution::probability(int32_t token) const {
  for (int64_t i = 0; i < keep; ++i) {
    if (order[i] == token) return probs[token] / mass;
  }
  return 0.0;
}

int32_t FilteredDistribution::draw(double uniform) const {
  double target = uniform * mass;
  for (int64_t i = 0; i < keep; ++i) {
    target -= probs[order[i]];
    if (target < 0) return order[i];
  }
  return order[keep - 1];
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
  return filter_distribution(logits, vocab, params).draw(uniform);
}

}  // namespace pagoda
