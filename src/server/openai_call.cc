#include "server/openai_call.h"

#include <atomic>
#include <ctime>
#include <random>
#include <span>

#include "core/error.h"
#include "tokenizer/text_stream.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}-{:016x}{:04x}", prefix, rng(), counter++ & 0xFFFF);
}

// The UTF-8 bytes of a token's text, as the chat API reports them.
Json utf8_bytes(const std::string& text) {
  Json bytes = Json::array();
  for (const char c : text)
    bytes.push_back(static_cast<uint8_t>(c));
  return bytes;
}

// One choice in flight: its engine request, its text so far and its log-probabilities.
struct ChoiceState {
  int64_t index = 0;
  int64_t prompt = 0;  // which of the request's prompts
  std::shared_ptr<RequestHandle> handle;
  std::unique_ptr<TextStream> text;
  std::string echo;           // the prompt text before the choice's text (completions echo)
  std::string finish_reason;  // empty while running
  int64_t num_tokens = 0;
  bool started = false;  // streaming: the first chunk (role, echo) went out
  // With prompt_logprobs asked for, once the prompt is computed (until streamed).
  std::vector<std::optional<Logprobs>> prompt_logprobs;
  // Not streamed, with logprobs asked for: the tokens kept so far, their log-probabilities made
  // into JSON only in the response (a JSON entry takes about a hundred times their bytes).
  std::vector<SampledToken> tokens;
};

}  // namespace

class OpenAiCall::State {
 public:
  State(EngineService& engine, const Tokenizer& tokenizer, OpenAiRequest request,
        const std::string& model)
      : engine_(engine),
        tokenizer_(tokenizer),
        request_(std::move(request)),
        model_(model),
        chat_(request_.endpoint == Endpoint::kChatCompletions),
        id_(random_id(chat_ ? "chatcmpl" : "cmpl")),
        created_(static_cast<int64_t>(std::time(nullptr))) {}

  ~State() { abort_unfinished(); }

  // Submits every choice; an invalid one aborts the others and raises a 400.
  void submit(const std::function<void()>& notify) {
    for (size_t p = 0; p < request_.prompts.size(); ++p) {
      for (int64_t i = 0; i < request_.n; ++i) {
        GenerationRequest generation{.prompt_token_ids = request_.prompts[p],
                                     .params = request_.params};
        if (generation.params.seed) *generation.params.seed += static_cast<uint64_t>(i);
        auto choice = std::make_unique<ChoiceState>();
        choice->index = static_cast<int64_t>(choices_.size());
        choice->prompt = static_cast<int64_t>(p);
        choice->text = std::make_unique<TextStream>(tokenizer_, request_.stop);
        if (request_.echo) choice->echo = request_.prompt_texts[p];
        try {
          choice->handle = engine_.submit(std::move(generation), notify);
        } catch (const Error& error) {
          abort_unfinished();
          throw ApiError(400, fmt::format("prompt {}: {}", p, error.what()), "prompt");
        }
        choices_.push_back(std::move(choice));
      }
      prompt_tokens_ += static_cast<int64_t>(request_.prompts[p].size());
    }
  }

  bool finished() const {
    for (const auto& choice : choices_) {
      if (choice->finish_reason.empty()) return false;
    }
    return true;
  }

  void stop_notifications() {
    for (const auto& choice : choices_) {
      if (choice->handle) choice->handle->clear_notify();
    }
  }

  void abort_unfinished() {
    for (const auto& choice : choices_) {
      if (choice->finish_reason.empty() && choice->handle) {
        engine_.abort(choice->handle);
        choice->finish_reason = "abort";
      }
    }
  }

  // One streaming chunk per choice that moved since the last call; never waits.
  std::vector<Json> poll() {
    std::vector<Json> chunks;
    for (const auto& choice : choices_) {
      if (!choice->finish_reason.empty()) continue;
      std::vector<RequestDelta> deltas = choice->handle->wait(milliseconds(0));
      for (Json& chunk : advance(*choice, deltas))
        chunks.push_back(std::move(chunk));
    }
    return chunks;
  }

  // The whole response, once finished().
  Json response() {
    Json choices = Json::array();
    int64_t completion_tokens = 0;
    for (const auto& choice : choices_) {
      completion_tokens += choice->num_tokens;
      Json entry = {{"index", choice->index}};
      const Json logprobs = choice->tokens.empty() ? Json() : token_logprobs(choice->tokens);
      if (chat_) {
        entry["message"] = {{"role", "assistant"}, {"content", choice->text->text()}};
        entry["logprobs"] = logprobs.is_null() ? Json() : Json{{"content", logprobs}};
      } else {
        entry["text"] = choice->echo + choice->text->text();
        entry["logprobs"] = completion_logprobs(logprobs, choice->echo.size());
      }
      if (request_.params.prompt_logprobs) entry["prompt_logprobs"] = prompt_logprobs(*choice);
      entry["finish_reason"] = choice->finish_reason;
      choices.push_back(std::move(entry));
    }
    Json body = header();
    body["choices"] = std::move(choices);
    body["usage"] = usage(completion_tokens);
    return body;
  }

  // The streamed usage chunk (stream_options.include_usage).
  Json usage_chunk() {
    int64_t completion_tokens = 0;
    for (const auto& choice : choices_)
      completion_tokens += choice->num_tokens;
    Json chunk = header();
    chunk["choices"] = Json::array();
    chunk["usage"] = usage(completion_tokens);
    return chunk;
  }

  bool wants_usage() const { return request_.include_usage; }

 private:
  Json header() const {
    const char* object =
        chat_ ? (request_.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
  }

  Json usage(int64_t completion_tokens) const {
    return {{"prompt_tokens", prompt_tokens_},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens_ + completion_tokens}};
  }

  // Chat-style entries for the tokens of one delta: {token, logprob, bytes, top_logprobs}.
  Json token_logprobs(std::span<const SampledToken> tokens) const {
    Json entries = Json::array();
    for (const SampledToken& token : tokens) {
      const std::string text = tokenizer_.decode(std::vector<int32_t>{token.token_id});
      Json top = Json::array();
      for (const TokenLogprob& alternative : token.top) {
        const std::string alt = tokenizer_.decode(std::vector<int32_t>{alternative.token_id});
        top.push_back(
            {{"token", alt}, {"logprob", alternative.logprob}, {"bytes", utf8_bytes(alt)}});
      }
      entries.push_back({{"token", text},
                         {"logprob", token.logprob},
                         {"bytes", utf8_bytes(text)},
                         {"top_logprobs", std::move(top)}});
    }
    return entries;
  }

  // The completions API's layout of the same entries, with text offsets from `offset`.
  static Json completion_logprobs(const Json& entries, size_t offset) {
    if (entries.is_null()) return Json();
    Json out = {{"tokens", Json::array()},
                {"token_logprobs", Json::array()},
                {"top_logprobs", Json::array()},
                {"text_offset", Json::array()}};
    for (const Json& entry : entries) {
      out["tokens"].push_back(entry["token"]);
      out["token_logprobs"].push_back(entry["logprob"]);
      Json top = Json::object();
      for (const Json& alternative : entry["top_logprobs"])
        top[alternative["token"].get<std::string>()] = alternative["logprob"];
      out["top_logprobs"].push_back(std::move(top));
      out["text_offset"].push_back(offset);
      offset += entry["token"].get<std::string>().size();
    }
    return out;
  }

  // vLLM's layout of prompt log-probabilities: null for the first token, then per token a map
  // from token id to its log-probability, rank and text, for the prompt's token and the top ones.
  // Null before the prompt is computed.
  Json prompt_logprobs(const ChoiceState& choice) const {
    const std::vector<std::optional<Logprobs>>& logprobs = choice.prompt_logprobs;
    if (logprobs.empty()) return Json();
    const std::vector<int32_t>& prompt = request_.prompts[choice.prompt];
    Json out = Json::array();
    for (size_t i = 0; i < logprobs.size(); ++i) {
      if (!logprobs[i]) {
        out.push_back(nullptr);
        continue;
      }
      const auto entry = [&](int32_t token, float logprob, int64_t rank) {
        return Json{{"logprob", logprob},
                    {"rank", rank},
                    {"decoded_token", tokenizer_.decode(std::vector<int32_t>{token})}};
      };
      Json position = Json::object();
      position[std::to_string(prompt[i])] =
          entry(prompt[i], logprobs[i]->logprob, logprobs[i]->rank);
      for (size_t k = 0; k < logprobs[i]->top.size(); ++k) {
        const TokenLogprob& top = logprobs[i]->top[k];
        position[std::to_string(top.token_id)] =
            entry(top.token_id, top.logprob, static_cast<int64_t>(k) + 1);
      }
      out.push_back(std::move(position));
    }
    return out;
  }

  // Applies a choice's deltas; returns its streaming chunks: a chat choice's first says only its
  // role, then one per call with new text or the end.
  std::vector<Json> advance(ChoiceState& choice, const std::vector<RequestDelta>& deltas) {
    std::string text;
    Json entries = Json::array();
    bool prompt_logprobs_due = false;
    for (const RequestDelta& delta : deltas) {
      if (!choice.finish_reason.empty()) break;
      if (!delta.prompt_logprobs.empty()) {
        choice.prompt_logprobs = delta.prompt_logprobs;
        prompt_logprobs_due = true;
      }
      const TextStream::Added added = add_delta_text(*choice.text, delta);
      text += added.text;
      const std::span<const SampledToken> kept(delta.new_tokens.data(), added.tokens);
      choice.num_tokens += static_cast<int64_t>(kept.size());
      if (request_.logprobs >= 0 && request_.stream) {
        for (Json& entry : token_logprobs(kept))
          entries.push_back(std::move(entry));
      } else if (request_.logprobs >= 0) {
        choice.tokens.insert(choice.tokens.end(), kept.begin(), kept.end());
      }
      if (choice.text->stopped()) {
        choice.finish_reason = "stop";
        engine_.abort(choice.handle);
      } else if (delta.finish_reason != FinishReason::kNone) {
        text += choice.text->finish();
        choice.finish_reason = choice.text->stopped() ? "stop" : to_string(delta.finish_reason);
        if (delta.finish_reason == FinishReason::kError) error_ = choice.handle->error();
        if (delta.finish_reason == FinishReason::kAbort ||
            delta.finish_reason == FinishReason::kError) {
          choice.finish_reason = "abort";
        }
      }
    }
    std::vector<Json> chunks;
    if (!request_.stream) return chunks;
    const bool opening = !choice.started;
    choice.started = true;
    if (opening && chat_) {
      chunks.push_back(chunk_of({{"index", choice.index},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", Json()},
                                 {"finish_reason", Json()}}));
    }
    const bool echo_due = opening && !choice.echo.empty();
    // Log-probabilities go out with their tokens even when the tokens' text is still held back.
    if (text.empty() && entries.empty() && choice.finish_reason.empty() && !echo_due &&
        !prompt_logprobs_due) {
      return chunks;
    }
    Json entry = {{"index", choice.index}};
    const Json logprobs = request_.logprobs >= 0 && !entries.empty() ? entries : Json();
    if (chat_) {
      entry["delta"] = {{"content", text}};
      entry["logprobs"] = logprobs.is_null() ? Json() : Json{{"content", logprobs}};
    } else {
      const size_t offset = choice.echo.size() + choice.text->text().size() - text.size();
      entry["text"] = (opening ? choice.echo : "") + text;
      entry["logprobs"] = completion_logprobs(logprobs, offset);
    }
    if (prompt_logprobs_due) {
      entry["prompt_logprobs"] = prompt_logprobs(choice);
      choice.prompt_logprobs.clear();  // sent: a stream keeps nothing it has sent
    }
    entry["finish_reason"] = choice.finish_reason.empty() || choice.finish_reason == "abort"
                                 ? Json()
                                 : Json(choice.finish_reason);
    chunks.push_back(chunk_of(std::move(entry)));
    return chunks;
  }

  Json chunk_of(Json choice) const {
    Json chunk = header();
    chunk["choices"] = Json::array({std::move(choice)});
    return chunk;
  }

 public:
  const std::string& error() const { return error_; }

 private:
  EngineService& engine_;
  const Tokenizer& tokenizer_;
  OpenAiRequest request_;
  std::string model_;
  bool chat_;
  std::string id_;
  int64_t created_;
  std::vector<std::unique_ptr<ChoiceState>> choices_;
  int64_t prompt_tokens_ = 0;
  std::string error_;  // set when the engine failed a choice
};

OpenAiCall::OpenAiCall(EngineService& engine, const Tokenizer& tokenizer, OpenAiRequest request,
                       const std::string& model)
    : state_(std::make_unique<State>(engine, tokenizer, std::move(request), model)) {}

OpenAiCall::~OpenAiCall() = default;

void OpenAiCall::submit(std::function<void()> notify) {
  state_->submit(notify);
}

bool OpenAiCall::finished() const {
  return state_->finished();
}

void OpenAiCall::abort_unfinished() {
  state_->abort_unfinished();
}

void OpenAiCall::stop_notifications() {
  state_->stop_notifications();
}

std::vector<Json> OpenAiCall::poll() {
  return state_->poll();
}

Json OpenAiCall::response() {
  return state_->response();
}

Json OpenAiCall::usage_chunk() {
  return state_->usage_chunk();
}

bool OpenAiCall::wants_usage() const {
  return state_->wants_usage();
}

const std::string& OpenAiCall::error() const {
  return state_->error();
}

}  // namespace pagoda
