// One request's whole state: its tokens, sampling parameters, what it has produced and where it
// is. The engine owns it; the scheduler, the model runner and the sampler read and advance it
// through pointers, so its tokens exist once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "engine/sampling_params.h"

namespace pagoda {

// Where a request is. The scheduler moves it between waiting, running and preempted (waiting
// again after its blocks were taken) and marks it finished when the engine removes it.
enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinished };

// Why a request ended: kNone while it runs; kError when a step it was in failed.
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error" (as OpenAI's API and vLLM name them), or "" for kNone.
std::string_view to_string(FinishReason reason);

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// A token's log-probability under the model's raw distribution (before penalties, temperature and
// filters, as vLLM reports it) and the k most likely tokens, most likely first.
struct Logprobs {
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
  int64_t rank = 0;  // of a prompt token: 1 + how many tokens are likelier
};

// A token as a step streams it: the id with its log-probabilities.
struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// A request's random stream. Seeded requests start from their seed, so their draws do not depend
// on what else is in the batch.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : state_(seed) {}
  double uniform();  // in [0, 1)

 private:
  uint64_t state_;
};

struct Request {
  Request(int64_t id, std::vector<int32_t> prompt_token_ids, SamplingParams params,
          uint64_t stream_seed);

  int64_t id = 0;
  SamplingParams params;
  std::vector<int32_t> token_ids;  // the prompt, then every token generated so far
  int64_t num_prompt_tokens = 0;
  int64_t num_computed = 0;  // tokens whose K/V are in the cache
  int32_t kv_row = -1;       // its row in the KV cache manager while it holds blocks
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                      // what failed, with kError
  std::vector<Logprobs> output_logprobs;  // per generated token
  // With params.prompt_logprobs: per prompt token recorded so far; the first is empty (nothing
  // predicts it).
  std::vector<std::optional<Logprobs>> prompt_logprobs;
  SamplerRng rng;
  // Speculative decoding: the tokens the drafter proposes after token_ids for the next verify step,
  // and, for a sampling request, the drafter's logits each was drawn from (a [vocab] f32 row per
  // draft, where the drafter ran). Set by the proposer before the step that verifies them.
  std::vector<int32_t> draft_token_ids;
  std::vector<Tensor> draft_logits;
  // Tokens whose K/V a draft model with layers of its own has in the cache (it lags num_computed
  // after a step that kept every draft, and is reset after preemption).
  int64_t draft_computed = 0;
  // The target's final hidden state [1, hidden] at the row that produced the newest token, for a
  // drafter that drafts from it (the Gemma 4 assistant).
  Tensor draft_hidden;
  // The draws that pick drafts, a stream apart from `rng`, so the acceptance draws do not depend on
  // what was drafted.
  SamplerRng draft_rng;

  std::span<const int32_t> prompt_token_ids() const {
    return std::span(token_ids).first(num_prompt_tokens);
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span(token_ids).subspan(num_prompt_tokens);
  }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // A request that wants prompt log-probabilities computes its whole prompt: it never starts from
  // a prefix-cache hit.
  bool cacheable() const { return !params.prompt_logprobs.has_value(); }
  // Whether a chunk from token `first` on computes prompt log-probabilities: a logits row per
  // token, each predicting the next prompt token. The scheduler bounds such tokens per step; the
  // sampler asks the model for their rows.
  bool prompt_logprob_rows(int64_t first) const {
    return params.prompt_logprobs.has_value() && first + 1 < num_prompt_tokens;
  }
  // The generated tokens with their log-probabilities.
  std::vector<SampledToken> output_tokens() const;
};

}  // namespace pagoda
