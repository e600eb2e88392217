#include "cli/generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/engine_flags.h"
#include "cli/prompts.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"

namespace pagoda {
namespace {

struct GenerateOptions {
  std::vector<std::string> prompts;     // text
  std::vector<std::string> prompt_ids;  // each "1,2,3"
  std::string prompts_file;   // JSONL: [ids], or {"prompt_token_ids"|"prompt"|"messages", ...}
  std::string messages_file;  // a JSON list of chat messages
  bool chat = false;          // text prompts are single user messages through the chat template
  SamplingParams sampling{.temperature = 0.0};  // defaults for every request: greedy
  std::optional<uint64_t> request_seed;
  bool json = false;
  bool stats = false;
  EngineOptions engine;
};

nlohmann::json logprob_list(const std::vector<TokenLogprob>& top) {
  nlohmann::json list = nlohmann::json::array();
  for (const TokenLogprob& entry : top) {
    list.push_back({{"token_id", entry.token_id}, {"logprob", entry.logprob}});
  }
  return list;
}

nlohmann::json result_json(const Request& result, const Tokenizer* tokenizer) {
  nlohmann::json out;
  out["prompt_token_ids"] = result.prompt_token_ids();
  const std::span<const int32_t> ids = result.output_token_ids();
  nlohmann::json logprobs = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    logprobs.push_back({{"token_id", ids[i]},
                        {"logprob", result.output_logprobs[i].logprob},
                        {"top_logprobs", logprob_list(result.output_logprobs[i].top)}});
  }
  out["token_ids"] = ids;
  if (tokenizer != nullptr) {
    out["text"] = tokenizer->decode({ids.begin(), ids.end()}, {.skip_special_tokens = true});
  }
  out["logprobs"] = logprobs;
  if (result.params.prompt_logprobs) {
    nlohmann::json prompt = nlohmann::json::array();
    for (size_t i = 0; i < result.prompt_logprobs.size(); ++i) {
      const auto& entry = result.prompt_logprobs[i];
      if (!entry) {
        prompt.push_back(nullptr);
        continue;
      }
      prompt.push_back({{"token_id", result.token_ids[i]},
                        {"logprob", entry->logprob},
                        {"top_logprobs", logprob_list(entry->top)}});
    }
    out["prompt_logprobs"] = prompt;
  } else {
    out["prompt_logprobs"] = nullptr;
  }
  out["finish_reason"] = to_string(result.finish_reason);
  return out;
}

void run_generate(const GenerateOptions& options) {
  const std::string model_dir = options.engine.paths.model();
  SamplingParams defaults = options.sampling;
  defaults.seed = options.request_seed;
  std::vector<PromptSpec> prompts;
  for (const std::string& text : options.prompts) {
    PromptSpec prompt{.params = defaults};
    if (options.chat) {
      prompt.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
    } else {
      prompt.text = text;
    }
    prompts.push_back(std::move(prompt));
  }
  for (const std::string& text : options.prompt_ids)
    prompts.push_back({.ids = parse_id_list(text), .params = defaults});
  if (!options.messages_file.empty()) {
    prompts.push_back({.messages = read_messages_file(options.messages_file), .params = defaults});
  }
  if (!options.prompts_file.empty()) {
    for (PromptSpec& prompt : read_prompts_file(options.prompts_file, defaults))
      prompts.push_back(std::move(prompt));
  }
  if (prompts.empty()) fail("no prompts: give a prompt, --prompt-ids or --prompts-file");

  // The tokenizer, when there is one: text and chat prompts need it, and outputs are decoded.
  const std::string tokenizer_dir = options.engine.paths.tokenizer();
  std::unique_ptr<Tokenizer> tokenizer;
  if (path_exists(tokenizer_dir + "/tokenizer.json")) {
    tokenizer = std::make_unique<Tokenizer>(options.engine.paths.load_tokenizer());
  }
  std::unique_ptr<ChatTemplate> chat;
  const bool wants_chat = std::any_of(prompts.begin(), prompts.end(),
                                      [](const PromptSpec& p) { return p.messages.has_value(); });
  if (wants_chat && tokenizer) chat = std::make_unique<ChatTemplate>(*tokenizer);
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      requests.push_back(
          {resolve_prompt(prompts[i], tokenizer.get(), chat.get()), prompts[i].params});
    } catch (const Error& error) {
      fail("prompt {}: {} (tokenizer directory '{}')", i, error.what(), tokenizer_dir);
    }
  }

  const EngineModels models = engine_models(model_dir, options.engine);
  const ModelConfig& config = models.target;
  // Plan the cache before loading weights, so bad flags fail fast. Without a budget, the pool
  // holds exactly this batch (a request too long for it is refused when it is added).
  const CacheConfig cache_config = engine_cache_config(options.engine, models);
  std::vector<int64_t> lengths;
  for (const GenerationRequest& request : requests) {
    const int64_t tokens = static_cast<int64_t>(request.prompt_token_ids.size()) +
                           std::clamp<int64_t>(request.params.max_tokens, 0, kMaxSequenceTokens);
    lengths.push_back(std::clamp<int64_t>(tokens, 1, *cache_config.max_model_len));
  }
  const KvCachePlan plan = plan_cache(models.planned, models.drafter(), cache_config, lengths);

  const auto started = std::chrono::steady_clock::now();
  RankModels ranks = load_model(models, options.engine);
  const auto loaded = std::chrono::steady_clock::now();
  ranks.allocate_caches(plan);
  const EngineConfig engine = ranks.with_ranks(engine_config(config, plan, options.engine));
  GenerationStats stats;
  const std::vector<Request> results =
      generate(ranks.model(), plan, ranks.cache(), engine, requests, &stats, ranks.drafter());
  const auto finished = std::chrono::steady_clock::now();

  for (size_t r = 0; r < results.size(); ++r) {
    if (options.json) {
      fmt::print("{}\n", json_dump(result_json(results[r], tokenizer.get())));
      continue;
    }
    const std::span<const int32_t> output = results[r].output_token_ids();
    const std::vector<int32_t> ids(output.begin(), output.end());
    if (tokenizer) {
      fmt::print("{}\n", tokenizer->decode(ids, {.skip_special_tokens = true}));
    } else {
      fmt::print("{}\n", fmt::join(ids, ","));
    }
  }
  const double load_s = std::chrono::duration<double>(loaded - started).count();
  const double run_s = std::chrono::duration<double>(finished - loaded).count();
  fmt::print(stderr, "loaded in {:.2f} s; generated in {:.2f} s\n", load_s, run_s);
  if (options.stats) {
    const double hit_rate =
        stats.prefix_query_tokens == 0
            ? 0.0
            : static_cast<double>(stats.prefix_hit_tokens) / stats.prefix_query_tokens;
    fmt::print(stderr,
               "requests            {}\n"
               "prompt tokens       {} (prefix-cache hits: {} of {} looked-up tokens, {:.1f}%)\n"
               "generated tokens    {}\n"
               "steps               {} ({:.2f} ms per step)\n"
               "preemptions         {}\n"
               "peak KV blocks      {} of {}\n",
               requests.size(), stats.prompt_tokens, stats.prefix_hit_tokens,
               stats.prefix_query_tokens, 100.0 * hit_rate, stats.generated_tokens, stats.steps,
               stats.steps == 0 ? 0.0 : 1000.0 * run_s / stats.steps, stats.preemptions,
               stats.peak_blocks_used, plan.num_blocks - kNullBlocks);
    if (ranks.drafter()) fmt::print(stderr, "{}", describe_spec_stats(stats));
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* command = app.add_subcommand("generate", "Generate tokens from prompts");
  add_model_flags(*command, options->engine.paths);
  add_chat_template_flag(*command, options->engine.paths);
  command->add_option("prompt,--prompt", options->prompts,
                      "A prompt as text (needs tokenizer.json); repeat for a batch");
  command->add_option("--prompt-ids", options->prompt_ids,
                      "A prompt as comma-separated token ids; repeat for a batch");
  command->add_option("--prompts-file", options->prompts_file,
                      "JSONL file: per line a list of token ids, or an object with "
                      "prompt_token_ids, prompt (text) or messages (chat) and sampling fields");
  command->add_flag("--chat", options->chat,
                    "Text prompts are user messages, rendered with the chat template");
  command->add_option("--messages", options->messages_file,
                      "A JSON file of chat messages ([{\"role\": ..., \"content\": ...}]) as one "
                      "prompt");
  SamplingParams& sampling = options->sampling;
  command->add_option("--max-tokens", sampling.max_tokens, "Tokens to generate per prompt")
      ->capture_default_str();
  command->add_option("--min-tokens", sampling.min_tokens, "No EOS or stop token before this many")
      ->capture_default_str();
  add_sampling_filter_flags(*command, sampling);
  command->add_option("--presence-penalty", sampling.presence_penalty)->capture_default_str();
  command->add_option("--frequency-penalty", sampling.frequency_penalty)->capture_default_str();
  command->add_option("--repetition-penalty", sampling.repetition_penalty)->capture_default_str();
  command->add_option("--stop-token-ids", sampling.stop_token_ids, "Token ids that end a request")
      ->delimiter(',')
      ->allow_extra_args(false);  // the next word is a prompt, not another id
  command
      ->add_option("--request-seed", options->request_seed,
                   "Seed every request's sampling (the same tokens in any batch)")
      ->check(refuse_negative);
  command->add_option("--logprobs", sampling.logprobs, "Top log-probabilities per generated token")
      ->capture_default_str();
  command->add_option("--prompt-logprobs", sampling.prompt_logprobs,
                      "Log-probabilities of the prompt tokens, with this many top alternatives");
  command->add_flag("--ignore-eos", sampling.ignore_eos, "Do not stop at end-of-sequence tokens");
  command->add_flag("--json", options->json, "One JSON object per request");
  command->add_flag("--stats", options->stats, "Print a table of batching statistics to stderr");
  add_engine_flags(*command, options->engine);
  command->callback([options] { run_generate(*options); });
}

}  // namespace pagoda
