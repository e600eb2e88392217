// OpenAI-style completion and chat requests: the JSON body checked field by field and turned into
// token ids and sampling parameters. Anything wrong is an ApiError with the HTTP status, the
// OpenAI error type and the offending parameter.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(std::move(message)),
        status(status),
        param(std::move(param)),
        type(std::move(type)) {}
  int status;
  std::string param;
  std::string type;
};

enum class Endpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<std::vector<int32_t>> prompts;  // token ids, one list per prompt
  std::vector<std::string> prompt_texts;      // the prompts as text (echo)
  SamplingParams params;                      // for every choice; seeds are per choice
  int64_t n = 1;                              // choices per prompt
  std::vector<std::string> stop;              // stop strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt text before each choice's text
  // Top alternatives per token with log-probabilities; -1: no log-probabilities at all.
  int64_t logprobs = -1;
};

struct RequestLimits {
  std::string served_model_name;
  int64_t max_model_len = 0;
  int64_t max_logprobs = SamplingParams::kMaxLogprobs;
  int64_t max_n = 128;
  // Prompts × n: the engine requests one call may start.
  int64_t max_choices = 256;
  // Log-probabilities (each token's and its alternatives', of the output and of prompts, over
  // every choice) that a response not streamed may hold at once.
  int64_t max_response_logprobs = int64_t{1} << 21;
  // The model's sampling defaults (--generation-config), for the fields a request leaves out; its
  // max_new_tokens also caps a chat completion's default length.
  GenerationDefaults generation;
};

// Parses a /v1/completions or /v1/chat/completions body. `chat` is null when the tokenizer has no
// chat template (chat requests then fail with 400).
OpenAiRequest parse_openai_request(const nlohmann::ordered_json& body, Endpoint endpoint,
                                   const Tokenizer& tokenizer, const ChatTemplate* chat,
                                   const RequestLimits& limits);

// The /tokenize body, {"prompt": TEXT, "add_special_tokens": BOOL} or {"messages": [...]} (through
// the chat template, which may be null), as token ids.
std::vector<int32_t> parse_tokenize_request(const nlohmann::ordered_json& body,
                                            const Tokenizer& tokenizer, const ChatTemplate* chat);
// The /detokenize body, {"tokens": [ID, ...]}: the ids, each an integer in the tokenizer's
// vocabulary.
std::vector<int32_t> parse_detokenize_request(const nlohmann::ordered_json& body,
                                              const Tokenizer& tokenizer);

}  // namespace pagoda
