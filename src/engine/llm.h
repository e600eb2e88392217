// pagoda as a library: one call builds a running engine — model, KV cache, tokenizer, chat
// template and the engine thread — from EngineOptions, as `pagoda serve` does; then prompts go in
// and text comes out, whole (generate, chat) or as it is made (stream). Every method may be called
// from several threads at once: requests from all of them share the engine's batches.
//
//   pagoda::EngineOptions options;  // the embedded model on the CPU
//   auto llm = pagoda::Llm::load(options);
//   pagoda::SamplingParams params{.temperature = 0, .max_tokens = 32};
//   for (const auto& out : llm->generate({pagoda::Prompt::of_text("In the beginning")}, params))
//     fmt::print("{}\n", out.text);
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_options.h"
#include "engine/engine_service.h"
#include "tokenizer/chat.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// A prompt as text (encoded with the tokenizer's special tokens, as `pagoda generate` does), as
// token ids, or as chat messages (rendered by the chat template).
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
  std::optional<nlohmann::ordered_json> messages;

  static Prompt of_text(std::string text) { return {.text = std::move(text)}; }
  static Prompt of_ids(std::vector<int32_t> ids) { return {.token_ids = std::move(ids)}; }
  static Prompt of_messages(nlohmann::ordered_json messages) {
    return {.messages = std::move(messages)};
  }
};

// One request's output, as vLLM's RequestOutput with its one completion. A stop token (EOS or a
// stop_token_id) ends token_ids but not text; a stop string ends text just before it.
struct RequestOutput {
  std::vector<int32_t> prompt_token_ids;
  std::vector<std::optional<Logprobs>> prompt_logprobs;  // with params.prompt_logprobs; first empty
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<Logprobs> logprobs;  // per generated token, with params.logprobs > 0 alternatives
  FinishReason finish_reason = FinishReason::kNone;
};

// What one step added to a streamed request: its new text (held back while it could still become
// a stop string), tokens and their log-probabilities; the last delta carries the finish reason.
struct StreamDelta {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<Logprobs> logprobs;
  std::vector<std::optional<Logprobs>> prompt_logprobs;  // in the first delta that has tokens
  FinishReason finish_reason = FinishReason::kNone;
};

class Llm;

// One streamed request. Dropping it aborts the request if it is still running. It must not
// outlive the Llm that made it.
class LlmStream {
 public:
  ~LlmStream();
  LlmStream(const LlmStream&) = delete;
  LlmStream& operator=(const LlmStream&) = delete;

  // Waits up to `timeout` for the request's next news. Returns nothing on a timeout, and nothing
  // for ever once the delta with the finish reason has been returned (finished()). Throws Error
  // when the engine failed while running the request. Calls from several threads take turns, each
  // delta going to one of them.
  std::optional<StreamDelta> next(std::chrono::milliseconds timeout = std::chrono::hours(24));
  bool finished() const { return finished_; }
  // Ends the request; the next call to next() returns its last delta (finish reason abort). Any
  // thread may call it, also while another waits in next().
  void abort();

  const std::vector<int32_t>& prompt_token_ids() const { return prompt_token_ids_; }

 private:
  friend class Llm;
  LlmStream(Llm& llm, std::vector<int32_t> prompt, const SamplingParams& params);

  Llm& llm_;
  std::vector<int32_t> prompt_token_ids_;
  std::unique_ptr<TextStream> text_;  // with a tokenizer
  std::shared_ptr<RequestHandle> handle_;
  std::mutex next_mutex_;  // one next() at a time: text_ follows the deltas in order
  std::atomic<bool> finished_{false};
};

class Llm {
 public:
  // Plans the KV cache, loads every rank's weights, the tokenizer and the chat template, and
  // starts the engine thread. Without a KV budget (cache.kv_cache_memory or num_blocks) the pool
  // takes 512 MiB on the CPU and, on a GPU, what gpu_memory_utilization leaves once the weights
  // are in. Error for options that cannot run, before any weight loads where it can tell.
  static std::unique_ptr<Llm> load(const EngineOptions& options);
  ~Llm();  // stops the engine thread; requests still running are dropped
  Llm(const Llm&) = delete;
  Llm& operator=(const Llm&) = delete;

  // Runs every prompt to completion in shared batches; outputs in the order of the prompts.
  // Error for a prompt that cannot run (too long, a bad token id, text without a tokenizer) or
  // bad parameters, before anything runs. `interrupted`, when given, is called while waiting: when
  // it throws, every request is aborted and the exception passes on.
  std::vector<RequestOutput> generate(std::span<const Prompt> prompts, const SamplingParams& params,
                                      const std::function<void()>& interrupted = {});
  // The same with each prompt's own parameters (params.size() == prompts.size()).
  std::vector<RequestOutput> generate_each(std::span<const Prompt> prompts,
                                           std::span<const SamplingParams> params,
                                           const std::function<void()>& interrupted = {});
  // One conversation per entry (each a JSON array of {role, content} messages).
  std::vector<RequestOutput> chat(std::span<const nlohmann::ordered_json> conversations,
                                  const SamplingParams& params,
                                  const std::function<void()>& interrupted = {});
  // Starts one request whose output arrives delta by delta.
  std::unique_ptr<LlmStream> stream(const Prompt& prompt, const SamplingParams& params);

  // Error when the model has no tokenizer.json.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special_tokens = true) const;
  std::string detokenize(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // A prompt's token ids (Error as generate() says).
  std::vector<int32_t> prompt_ids(const Prompt& prompt) const;

  EngineService::Snapshot stats() const { return service_->snapshot(); }
  std::string metrics_text() const { return service_->metrics_text(); }

  // For callers that serve the engine themselves (`pagoda serve`).
  EngineService& service() { return *service_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }    // null without tokenizer.json
  const ChatTemplate* chat_template() const { return chat_.get(); }  // null without a template
  const KvCachePlan& plan() const { return plan_; }
  const ModelConfig& config() const { return models_.target; }
  // SamplingParams{} with the model's sampling defaults (--generation-config) in place: what a
  // request that gives none runs with, as vLLM's get_default_sampling_params().
  SamplingParams default_sampling_params() const {
    return with_generation_defaults(SamplingParams{}, models_.target.generation);
  }
  const std::string& model_dir() const { return models_.model_dir; }

 private:
  friend class LlmStream;
  Llm() = default;

  EngineModels models_;
  KvCachePlan plan_;
  RankModels ranks_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<EngineService> service_;  // last: its thread stops before the rest goes
};

}  // namespace pagoda
