#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/files.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

void check_finite(const char* name, double value) {
  if (!std::isfinite(value)) fail("{} is {}; it must be a finite number", name, value);
}

[[noreturn]] void wrong_type(const std::string& key, const char* expected, const Json& value) {
  throw FieldError(fmt::format("'{}' must be {}, not {}", key, expected, json_excerpt(value)), key);
}

double number(const std::string& key, const Json& value) {
  if (!value.is_number()) wrong_type(key, "a number", value);
  return value.get<double>();
}

}  // namespace

int64_t read_integer(const std::string& key, const Json& value) {
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    wrong_type(key, "an integer", value);
  }
  return value.get<int64_t>();
}

bool read_boolean(const std::string& key, const Json& value) {
  if (!value.is_boolean()) wrong_type(key, "true or false", value);
  return value.get<bool>();
}

std::vector<int32_t> read_token_ids(const std::string& key, const Json& value) {
  if (!value.is_array()) wrong_type(key, "a list of token ids", value);
  std::vector<int32_t> ids;
  for (const Json& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      wrong_type(key, "a list of token ids", id);
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

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
  // Applied as a float: outside these bounds it would be 0 or infinite there.
  if (!(repetition_penalty >= 1e-30 && repetition_penalty <= 1e30)) {
    fail("repetition_penalty is {}; it must be in [1e-30, 1e30]", repetition_penalty);
  }
  if (max_tokens < 1) fail("max_tokens is {}; it must be at least 1", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    fail("min_tokens is {}; it must be in [0, max_tokens = {}]", min_tokens, max_tokens);
  }
  if (logprobs < 0 || logprobs > kMaxLogprobs) {
    fail("logprobs is {}; it must be in [0, {}]", logprobs, kMaxLogprobs);
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > kMaxLogprobs)) {
    fail("prompt_logprobs is {}; it must be in [0, {}]", *prompt_logprobs, kMaxLogprobs);
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      fail("stop token id {} is outside the vocabulary of {}", id, vocab_size);
    }
  }
  check_stop(stop);
}

void SamplingParams::check_stop(std::span<const std::string> stop) {
  if (stop.size() > kMaxStopStrings) {
    fail("stop has {} strings; at most {} are allowed", stop.size(), kMaxStopStrings);
  }
  for (const std::string& s : stop) {
    if (s.empty()) fail("stop cannot contain an empty string");
    if (s.size() > kMaxStopBytes) {
      fail("a stop string is {} bytes long; at most {} are allowed", s.size(), kMaxStopBytes);
    }
  }
}

SamplingParams read_sampling_params(const Json& object, SamplingParams params,
                                    std::span<const std::string_view> other_fields) {
  if (!object.is_object()) throw FieldError("a request must be a JSON object", "");
  for (const auto& [key, value] : object.items()) {
    if (std::find(other_fields.begin(), other_fields.end(), key) != other_fields.end()) continue;
    if (value.is_null()) continue;
    if (key == "temperature") {
      params.temperature = number(key, value);
    } else if (key == "top_k") {
      params.top_k = read_integer(key, value);
    } else if (key == "top_p") {
      params.top_p = number(key, value);
    } else if (key == "min_p") {
      params.min_p = number(key, value);
    } else if (key == "seed") {
      params.seed = static_cast<uint64_t>(read_integer(key, value));
    } else if (key == "max_tokens") {
      params.max_tokens = read_integer(key, value);
    } else if (key == "min_tokens") {
      params.min_tokens = read_integer(key, value);
    } else if (key == "stop_token_ids") {
      params.stop_token_ids = read_token_ids(key, value);
    } else if (key == "ignore_eos") {
      params.ignore_eos = read_boolean(key, value);
    } else if (key == "presence_penalty") {
      params.presence_penalty = number(key, value);
    } else if (key == "frequency_penalty") {
      params.frequency_penalty = number(key, value);
    } else if (key == "repetition_penalty") {
      params.repetition_penalty = number(key, value);
    } else if (key == "logprobs") {
      params.logprobs = read_integer(key, value);
    } else if (key == "prompt_logprobs") {
      params.prompt_logprobs = read_integer(key, value);
    } else {
      throw FieldError(fmt::format("unknown request field '{}'", excerpt(key)), key);
    }
  }
  return params;
}

SamplingParams with_generation_defaults(SamplingParams params, const GenerationDefaults& defaults) {
  params.temperature = defaults.temperature.value_or(params.temperature);
  params.top_k = defaults.top_k.value_or(params.top_k);
  params.top_p = defaults.top_p.value_or(params.top_p);
  params.min_p = defaults.min_p.value_or(params.min_p);
  params.repetition_penalty = defaults.repetition_penalty.value_or(params.repetition_penalty);
  params.max_tokens = defaults.max_new_tokens.value_or(params.max_tokens);
  return params;
}

}  // namespace pagoda
