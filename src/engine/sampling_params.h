// Per-request sampling parameters, with the meaning vLLM gives them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace pagoda {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0 or -1: all tokens
  double top_p = 1.0;        // keep the smallest most-likely set whose probability reaches top_p
  double min_p = 0.0;        // drop tokens less likely than min_p × the most likely one
  std::optional<uint64_t> seed;  // a seeded request samples the same tokens in any batch
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // EOS and stop tokens are impossible before this many tokens
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  double presence_penalty = 0.0;    // subtracted once from every token already generated
  double frequency_penalty = 0.0;   // subtracted per occurrence in the generated tokens
  double repetition_penalty = 1.0;  // divides positive / multiplies negative logits of tokens seen
                                    // in the prompt or the output
  int64_t logprobs = 0;             // top alternatives reported per generated token
  std::optional<int64_t> prompt_logprobs;
  // The most alternatives either may ask for (vLLM's default max_logprobs): each is kept per token,
  // so a prompt's worth of them at a vocabulary's size would not fit in memory.
  static constexpr int64_t kMaxLogprobs = 20;
  // Strings that end the output text, which then stops just before the first of them. Text is made
  // where tokens are detokenized (the OpenAI server, the library facade), not by the engine.
  std::vector<std::string> stop;

  bool greedy() const { return temperature == 0.0; }
  // Whether a token's logits change with the tokens before it (repetition, frequency or presence).
  bool has_penalties() const {
    return repetition_penalty != 1.0 || frequency_penalty != 0.0 || presence_penalty != 0.0;
  }
  // Throws Error naming the parameter, its value and the allowed range.
  void validate(int64_t vocab_size) const;
};

// A request field that is unknown or holds a value of the wrong type; `field` names it.
class FieldError : public Error {
 public:
  FieldError(const std::string& message, std::string field)
      : Error(message), field(std::move(field)) {}
  std::string field;
};

// Typed reads of the request field `key`; FieldError (quoting a short prefix of the value)
// otherwise. A token id is an integer in [0, 2^31).
int64_t read_integer(const std::string& key, const nlohmann::ordered_json& value);
bool read_boolean(const std::string& key, const nlohmann::ordered_json& value);
std::vector<int32_t> read_token_ids(const std::string& key, const nlohmann::ordered_json& value);

// The sampling fields of a request object in vLLM's spelling, over `defaults`: temperature,
// top_k, top_p, min_p, seed, max_tokens, min_tokens, stop_token_ids, ignore_eos, the presence,
// frequency and repetition penalties, logprobs (top alternatives per generated token) and
// prompt_logprobs. A null value leaves the default. Keys in `other_fields` are the caller's to
// read, even one of these. Throws FieldError for any other key and for a value of the wrong type;
// ranges are validate()'s to check.
SamplingParams read_sampling_params(const nlohmann::ordered_json& object, SamplingParams defaults,
                                    std::span<const std::string_view> other_fields);

}  // namespace pagoda
