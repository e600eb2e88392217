#include "engine/llm.h"

#include "core/error.h"
#include "core/files.h"

namespace pagoda {

std::unique_ptr<Llm> Llm::load(const EngineOptions& options) {
  std::unique_ptr<Llm> llm(new Llm);
  const std::string model_dir = options.paths.model();
  if (path_exists(options.paths.tokenizer() + "/tokenizer.json")) {
    llm->tokenizer_ = std::make_unique<Tokenizer>(options.paths.load_tokenizer());
    if (!llm->tokenizer_->chat_template().empty()) {
      llm->chat_ = std::make_unique<ChatTemplate>(*llm->tokenizer_);
    }
  }
  llm->models_ = engine_models(model_dir, options);
  const Device device = engine_device(options);
  CacheConfig cache_config = engine_cache_config(options, llm->models_);
  // A long-lived engine needs room for many sequences. Without a budget: on the CPU, 512 MiB; on a
  // GPU, what gpu_memory_utilization leaves once the model is loaded.
  const bool budgeted = cache_config.memory_bytes || cache_config.num_blocks;
  if (device.is_cpu() && !budgeted) cache_config.memory_bytes = int64_t{512} << 20;
  // Planned once before loading, so bad options fail before the weights are read.
  llm->plan_ = plan_cache(llm->models_.planned, llm->models_.drafter(), cache_config);
  llm->ranks_ = load_model(llm->models_, options);
  if (!device.is_cpu() && !budgeted) {
    cache_config.memory_bytes = gpu_kv_cache_budget(device, options.gpu_memory_utilization);
    llm->plan_ = plan_cache(llm->models_.planned, llm->models_.drafter(), cache_config);
  }
  llm->ranks_.allocate_caches(llm->plan_);
  llm->service_ = std::make_unique<EngineService>(
      llm->ranks_.model(), llm->plan_, llm->ranks_.cache(),
      llm->ranks_.with_ranks(engine_config(llm->models_.target, llm->plan_, options)),
      llm->ranks_.drafter());
  return llm;
}

Llm::~Llm() = default;

std::vector<int32_t> Llm::prompt_ids(const Prompt& prompt) const {
  if (prompt.messages) {
    if (chat_ == nullptr) fail("chat messages need a tokenizer with a chat template");
    return chat_->encode(*prompt.messages);
  }
  if (prompt.text) return tokenize(*prompt.text);
  return prompt.token_ids;
}

std::vector<int32_t> Llm::tokenize(std::string_view text, bool add_special_tokens) const {
  if (tokenizer_ == nullptr)
    fail("text needs a tokenizer, and {} has no tokenizer.json", model_dir());
  return tokenizer_->encode(text, {.add_special_tokens = add_special_tokens});
}

std::string Llm::detokenize(std::span<const int32_t> ids, bool skip_special_tokens) const {
  if (tokenizer_ == nullptr)
    fail("text needs a tokenizer, and {} has no tokenizer.json", model_dir());
  return tokenizer_->decode(ids, {.skip_special_tokens = skip_special_tokens});
}

std::unique_ptr<LlmStream> Llm::stream(const Prompt& prompt, const SamplingParams& params) {
  return std::unique_ptr<LlmStream>(new LlmStream(*this, prompt_ids(prompt), params));
}

std::vector<RequestOutput> Llm::generate(std::span<const Prompt> prompts,
                                         const SamplingParams& params,
                                         const std::function<void()>& interrupted) {
  const std::vector<SamplingParams> each(prompts.size(), params);
  return generate_each(prompts, each, interrupted);
}

std::vector<RequestOutput> Llm::generate_each(std::span<const Prompt> prompts,
                                              std::span<const SamplingParams> params,
                                              const std::function<void()>& interrupted) {
  if (params.size() != prompts.size()) {
    fail("{} sampling parameters for {} prompts", params.size(), prompts.size());
  }
  // Every prompt resolved and submitted before any output is awaited: they batch together, and a
  // bad one fails the call before the rest has run (dropping the streams aborts those submitted).
  std::vector<std::unique_ptr<LlmStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      streams.push_back(stream(prompts[i], params[i]));
    } catch (const Error& error) {
      fail("prompt {}: {}", i, error.what());
    }
  }
  std::vector<RequestOutput> outputs(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    RequestOutput& out = outputs[i];
    out.prompt_token_ids = streams[i]->prompt_token_ids();
    while (!streams[i]->finished()) {
      if (interrupted) interrupted();
      const std::optional<StreamDelta> delta = streams[i]->next(std::chrono::milliseconds(50));
      if (!delta) continue;
      if (!delta->prompt_logprobs.empty()) out.prompt_logprobs = delta->prompt_logprobs;
      out.text += delta->text;
      out.token_ids.insert(out.token_ids.end(), delta->token_ids.begin(), delta->token_ids.end());
      out.logprobs.insert(out.logprobs.end(), delta->logprobs.begin(), delta->logprobs.end());
      out.finish_reason = delta->finish_reason;
    }
  }
  return outputs;
}

std::vector<RequestOutput> Llm::chat(std::span<const nlohmann::ordered_json> conversations,
                                     const SamplingParams& params,
                                     const std::function<void()>& interrupted) {
  std::vector<Prompt> prompts;
  for (const nlohmann::ordered_json& messages : conversations)
    prompts.push_back(Prompt::of_messages(messages));
  return generate(prompts, params, interrupted);
}

LlmStream::LlmStream(Llm& llm, std::vector<int32_t> prompt, const SamplingParams& params)
    : llm_(llm), prompt_token_ids_(std::move(prompt)) {
  if (llm.tokenizer_) text_ = std::make_unique<TextStream>(*llm.tokenizer_, params.stop);
  if (!params.stop.empty() && !text_) {
    fail("stop strings need a tokenizer, and {} has no tokenizer.json", llm.model_dir());
  }
  handle_ = llm.service_->submit({prompt_token_ids_, params});
}

LlmStream::~LlmStream() {
  if (!finished_) llm_.service_->abort(handle_);
}

void LlmStream::abort() {
  if (!finished_) llm_.service_->abort(handle_);
}

std::optional<StreamDelta> LlmStream::next(std::chrono::milliseconds timeout) {
  const std::lock_guard lock(next_mutex_);
  if (finished_) return std::nullopt;
  const std::vector<RequestDelta> deltas = handle_->wait(timeout);
  if (deltas.empty()) return std::nullopt;
  StreamDelta out;
  for (const RequestDelta& delta : deltas) {
    if (out.finish_reason != FinishReason::kNone) break;
    if (!delta.prompt_logprobs.empty()) out.prompt_logprobs = delta.prompt_logprobs;
    size_t kept = delta.new_tokens.size();
    if (text_) {
      TextStream::Added added = add_delta_text(*text_, delta);
      out.text += added.text;
      kept = added.tokens;
    }
    for (size_t i = 0; i < kept; ++i) {
      const SampledToken& token = delta.new_tokens[i];
      out.token_ids.push_back(token.token_id);
      out.logprobs.push_back({.logprob = token.logprob, .top = token.top});
    }
    if (text_ && text_->stopped()) {
      out.finish_reason = FinishReason::kStop;
      llm_.service_->abort(handle_);
    } else if (delta.finish_reason != FinishReason::kNone) {
      if (text_) out.text += text_->finish();
      out.finish_reason = delta.finish_reason;
      if (text_ && text_->stopped()) out.finish_reason = FinishReason::kStop;
    }
  }
  if (out.finish_reason != FinishReason::kNone) finished_ = true;
  if (out.finish_reason == FinishReason::kError) fail("the engine failed: {}", handle_->error());
  return out;
}

}  // namespace pagoda
