#include "engine/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

void check_finite(const char* name, double value) {
  if (!std::isfinite(value)) fail("{} is {}; it must be a finite number", name, value);
}

}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
  for (const auto& [name, value] :
       {std::pair{"temperature", temperature}, std::pair{"top_p", top_p}, std::pair{"min_p", min_p},
        std::pair{"presence_penalty", presence_penalty},
        std::pair{"frequency_penalty", frequency_penalty},
        std::pair{"repetition_penalty", repetition_penalty}}) {
    check_finite(name, value);
  }
  if (temperature < 0.0) fail("temperature is {}; it must be at least 0", temperature);
  if (top_k < -1) fail("top_k is {}; it must be -1, 0 (all tokens) or positive", top_k);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p is {}; it must be in (0, 1]", top_p);
  if (min_p < 0.0 || min_p > 1.0) fail("min_p is {}; it must be in [0, 1]", min_p);
  if (presence_penalty < -2.0 || presence_penalty > 2.0) {
    fail("presence_penalty is {}; it must be in [-2, 2]", presence_penalty);
  }
  if (frequency_penalty < -2.0 || frequency_penalty > 2.0) {
    fail("frequency_penalty is {}; it must be in [-2, 2]", frequency_penalty);
  }
  if (repetition_penalty <= 0.0) {
    fail("repetition_penalty is {}; it must be positive", repetition_penalty);
  }
  if (max_tokens < 1) fail("max_tokens is {}; it must be at least 1", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    fail("min_tokens is {}; it must be in [0, max_tokens = {}]", min_tokens, max_tokens);
  }
  if (logprobs < 0) fail("logprobs is {}; it must not be negative", logprobs);
  if (prompt_logprobs && *prompt_logprobs < 0) {
    fail("prompt_logprobs is {}; it must not be negative", *prompt_logprobs);
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      fail("stop token id {} is outside the vocabulary of {}", id, vocab_size);
    }
  }
}

}  // namespace pagoda
