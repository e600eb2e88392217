#include "server/openai_request.h"

#include <algorithm>

#include "core/error.h"
#include "core/files.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

bool is_id_list(const Json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const Json& item : value) {
    if (!item.is_number_integer()) return false;
  }
  return true;
}

// The completions `prompt`: a string, a list of ids, a list of strings or a list of id lists.
void read_prompts(const Json& prompt, const Tokenizer& tokenizer, int64_t max_prompts,
                  OpenAiRequest& request) {
  const auto add_text = [&](const std::string& text) {
    request.prompts.push_back(tokenizer.encode(text));
    request.prompt_texts.push_back(text);
  };
  const auto add_ids = [&](const Json& ids) {
    request.prompts.push_back(read_token_ids("prompt", ids));
    request.prompt_texts.push_back(tokenizer.decode(request.prompts.back()));
  };
  if (prompt.is_string()) {
    add_text(prompt.get<std::string>());
  } else if (is_id_list(prompt)) {
    add_ids(prompt);
  } else if (prompt.is_array() && !prompt.empty()) {
    // Counted before anything is tokenized.
    if (static_cast<int64_t>(prompt.size()) > max_prompts) {
      bad("prompt",
          fmt::format("{} prompts in one request; at most {}", prompt.size(), max_prompts));
    }
    for (const Json& item : prompt) {
      if (item.is_string()) {
        add_text(item.get<std::string>());
      } else if (is_id_list(item)) {
        add_ids(item);
      } else {
        bad("prompt", "each prompt in a list must be a string or a list of token ids");
      }
    }
  } else {
    bad("prompt", "'prompt' must be a string, a list of token ids or a list of those");
  }
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    if (request.prompts[i].empty()) bad("prompt", fmt::format("prompt {} has no tokens", i));
  }
}

std::vector<std::string> read_stop(const Json& value) {
  std::vector<std::string> stop;
  if (value.is_string()) {
    stop.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (const Json& item : value) {
      if (!item.is_string()) bad("stop", "'stop' must be a string or a list of strings");
      stop.push_back(item.get<std::string>());
    }
  } else if (!value.is_null()) {
    bad("stop", "'stop' must be a string or a list of strings");
  }
  try {
    SamplingParams::check_stop(stop);
  } catch (const Error& error) {
    bad("stop", error.what());
  }
  return stop;
}

// The request fields that are not sampling parameters: read here, or (user) accepted and unused.
void read_request_fields(const Json& body, OpenAiRequest& request) {
  const auto optional = [&](const char* name) -> const Json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const Json* v = optional("n")) request.n = read_integer("n", *v);
  if (const Json* v = optional("stop")) request.stop = read_stop(*v);
  if (const Json* v = optional("stream")) request.stream = read_boolean("stream", *v);
  if (const Json* v = optional("stream_options")) {
    if (!v->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!request.stream)
      bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (v->contains("include_usage")) {
      request.include_usage = read_boolean("stream_options.include_usage", (*v)["include_usage"]);
    }
  }
  if (const Json* v = optional("user"); v != nullptr && !v->is_string()) {
    bad("user", "'user' must be a string");
  }
}

// A response that is not streamed holds every log-probability it reports at once (each a JSON
// object of about a hundred bytes); a stream sends them as they come and keeps none. Counted in
// double, as max_tokens may be near 2^63 here.
void check_response_logprobs(const OpenAiRequest& request, const RequestLimits& limits) {
  if (request.stream) return;
  const double tokens =
      static_cast<double>(std::min(request.params.max_tokens, limits.max_model_len));
  double entries = 0;
  for (const std::vector<int32_t>& prompt : request.prompts) {
    if (request.logprobs >= 0) entries += tokens * static_cast<double>(request.logprobs + 1);
    if (request.params.prompt_logprobs) {
      entries += static_cast<double>(prompt.size()) *
                 static_cast<double>(*request.params.prompt_logprobs + 1);
    }
  }
  entries *= static_cast<double>(request.n);
  if (entries > static_cast<double>(limits.max_response_logprobs)) {
    bad(request.logprobs >= 0 ? "logprobs" : "prompt_logprobs",
        fmt::format("the response would hold up to {:.0f} log-probabilities; at most {} unless it "
                    "is streamed ('stream': true sends them as they are made)",
                    entries, limits.max_response_logprobs));
  }
}

OpenAiRequest read_request(const Json& body, Endpoint endpoint, const Tokenizer& tokenizer,
                           const ChatTemplate* chat, const RequestLimits& limits) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  OpenAiRequest request{.endpoint = endpoint};
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) bad("model", "'model' must be a string");
    const std::string model = body["model"].get<std::string>();
    if (model != limits.served_model_name) {
      throw ApiError(404,
                     fmt::format("the model '{}' does not exist; this server has '{}'", model,
                                 limits.served_model_name),
                     "model", "NotFoundError");
    }
  }
  // The sampling fields, read as the command line's prompts files read them; the rest are each
  // endpoint's own.
  static constexpr std::string_view kCompletionFields[] = {
      "model", "prompt", "n", "stop", "stream", "stream_options", "echo", "logprobs", "user"};
  static constexpr std::string_view kChatFields[] = {
      "model",    "messages",     "n",
      "stop",     "stream",       "stream_options",
      "logprobs", "top_logprobs", "max_completion_tokens",
      "user"};
  request.params = read_sampling_params(
      body, with_generation_defaults({.max_tokens = 16}, limits.generation),
      endpoint == Endpoint::kCompletions ? std::span<const std::string_view>(kCompletionFields)
                                         : std::span<const std::string_view>(kChatFields));
  read_request_fields(body, request);
  const auto given = [&](const char* name) { return body.contains(name) && !body[name].is_null(); };
  if (endpoint == Endpoint::kCompletions) {
    if (!body.contains("prompt")) bad("prompt", "'prompt' is required");
    read_prompts(body["prompt"], tokenizer, limits.max_choices, request);
    if (body.contains("echo") && !body["echo"].is_null())
      request.echo = read_boolean("echo", body["echo"]);
    if (body.contains("logprobs") && !body["logprobs"].is_null()) {
      request.logprobs = read_integer("logprobs", body["logprobs"]);
      if (request.logprobs < 0) bad("logprobs", "'logprobs' must not be negative");
    }
  } else {
    if (!body.contains("messages")) bad("messages", "'messages' is required");
    if (chat == nullptr) bad("messages", "this model has no chat template");
    try {
      request.prompts.push_back(chat->encode(body["messages"]));
    } catch (const Error& error) {
      bad("messages", error.what());
    }
    request.prompt_texts.push_back("");
    if (given("max_completion_tokens")) {
      request.params.max_tokens =
          read_integer("max_completion_tokens", body["max_completion_tokens"]);
    }
    const bool logprobs = given("logprobs") && read_boolean("logprobs", body["logprobs"]);
    if (given("top_logprobs") && !logprobs) {
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    if (logprobs) {
      request.logprobs = 0;
      if (given("top_logprobs")) {
        request.logprobs = read_integer("top_logprobs", body["top_logprobs"]);
        if (request.logprobs < 0) bad("top_logprobs", "'top_logprobs' must not be negative");
      }
    }
    // Without max_tokens a chat completion may run to the end of the context (or the model's
    // max_new_tokens).
    if (!given("max_tokens") && !given("max_completion_tokens")) {
      const int64_t room = limits.max_model_len - static_cast<int64_t>(request.prompts[0].size());
      request.params.max_tokens =
          std::max<int64_t>(std::min(room, limits.generation.max_new_tokens.value_or(room)), 1);
    }
  }
  if (request.logprobs > limits.max_logprobs) {
    bad("logprobs", fmt::format("at most {} log-probabilities per token; asked for {}",
                                limits.max_logprobs, request.logprobs));
  }
  request.params.logprobs = std::max<int64_t>(request.logprobs, 0);
  if (request.params.prompt_logprobs && *request.params.prompt_logprobs > limits.max_logprobs) {
    bad("prompt_logprobs", fmt::format("at most {} log-probabilities per token; asked for {}",
                                       limits.max_logprobs, *request.params.prompt_logprobs));
  }
  if (request.n < 1 || request.n > limits.max_n) {
    bad("n", fmt::format("'n' is {}; it must be in [1, {}]", request.n, limits.max_n));
  }
  const int64_t choices = static_cast<int64_t>(request.prompts.size()) * request.n;
  if (choices > limits.max_choices) {
    bad("n", fmt::format("{} prompts × n {} = {} choices in one request; at most {}",
                         request.prompts.size(), request.n, choices, limits.max_choices));
  }
  try {
    request.params.validate(tokenizer.vocab_size());
  } catch (const Error& error) {
    bad("", error.what());
  }
  check_response_logprobs(request, limits);
  return request;
}

}  // namespace

OpenAiRequest parse_openai_request(const Json& body, Endpoint endpoint, const Tokenizer& tokenizer,
                                   const ChatTemplate* chat, const RequestLimits& limits) {
  try {
    return read_request(body, endpoint, tokenizer, chat, limits);
  } catch (const FieldError& error) {
    bad(error.field, error.what());
  }
}

std::vector<int32_t> parse_tokenize_request(const Json& body, const Tokenizer& tokenizer,
                                            const ChatTemplate* chat) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  if (body.contains("messages")) {
    if (chat == nullptr) throw ApiError(400, "this model has no chat template", "messages");
    return chat->encode(body["messages"]);
  }
  if (!body.contains("prompt") || !body["prompt"].is_string()) {
    throw ApiError(400, "give 'prompt' (a string) or 'messages'", "prompt");
  }
  const Json special = body.value("add_special_tokens", Json(true));
  if (!special.is_boolean()) {
    throw ApiError(400, "'add_special_tokens' must be true or false", "add_special_tokens");
  }
  return tokenizer.encode(body["prompt"].get<std::string>(),
                          {.add_special_tokens = special.get<bool>()});
}

std::vector<int32_t> parse_detokenize_request(const Json& body, const Tokenizer& tokenizer) {
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
    throw ApiError(400, "give 'tokens', a list of token ids", "tokens");
  }
  std::vector<int32_t> ids;
  for (const Json& id : body["tokens"]) {
    try {
      ids.push_back(
          static_cast<int32_t>(json_integer(id, 0, tokenizer.vocab_size() - 1, "'tokens'")));
    } catch (const Error& error) {
      throw ApiError(400, error.what(), "tokens");
    }
  }
  return ids;
}

}  // namespace pagoda
