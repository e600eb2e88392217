#include "cli/generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cache_flags.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/sampling_params.h"

namespace pagoda {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::vector<std::string> prompt_ids;  // each "1,2,3"
  std::string prompts_file;  // JSONL: [ids], or {"prompt_token_ids": [ids], sampling fields...}
  SamplingParams sampling{.temperature = 0.0};  // defaults for every request: greedy
  std::optional<uint64_t> request_seed;
  uint64_t seed = 0;  // dummy weights and unseeded requests
  bool json = false;
  bool stats = false;
  bool no_prefix_caching = false;
  SchedulerConfig scheduler;
  std::string device = "cpu";
  std::string load_format = "auto";
  std::string weight_dtype = "auto";
  CacheFlags cache;
};

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 0 || value > INT32_MAX) {
      fail("--prompt-ids '{}': '{}' is not a token id", text, item);
    }
    ids.push_back(static_cast<int32_t>(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

std::vector<int32_t> read_ids(const nlohmann::json& value, const std::string& where) {
  if (!value.is_array()) fail("{}: expected a list of token ids", where);
  std::vector<int32_t> ids;
  for (const auto& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      fail("{}: {} is not a token id", where, id.dump());
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// Sampling fields of a request object over the command line's defaults.
SamplingParams read_sampling(const nlohmann::json& object, SamplingParams params,
                             const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    auto number = [&]() {
      if (!value.is_number()) fail("{}: '{}' must be a number; got {}", where, key, value.dump());
      return value.get<double>();
    };
    auto integer = [&]() {
      if (!value.is_number_integer()) {
        fail("{}: '{}' must be an integer; got {}", where, key, value.dump());
      }
      return value.get<int64_t>();
    };
    if (key == "prompt_token_ids") continue;
    if (key == "temperature")
      params.temperature = number();
    else if (key == "top_k")
      params.top_k = integer();
    else if (key == "top_p")
      params.top_p = number();
    else if (key == "min_p")
      params.min_p = number();
    else if (key == "seed")
      params.seed = static_cast<uint64_t>(integer());
    else if (key == "max_tokens")
      params.max_tokens = integer();
    else if (key == "min_tokens")
      params.min_tokens = integer();
    else if (key == "presence_penalty")
      params.presence_penalty = number();
    else if (key == "frequency_penalty")
      params.frequency_penalty = number();
    else if (key == "repetition_penalty")
      params.repetition_penalty = number();
    else if (key == "logprobs")
      params.logprobs = integer();
    else if (key == "prompt_logprobs")
      params.prompt_logprobs = integer();
    else if (key == "stop_token_ids")
      params.stop_token_ids = read_ids(value, where + " stop_token_ids");
    else if (key == "ignore_eos") {
      if (!value.is_boolean()) fail("{}: 'ignore_eos' must be true or false", where);
      params.ignore_eos = value.get<bool>();
    } else {
      fail("{}: unknown request field '{}'", where, key);
    }
  }
  return params;
}

std::vector<GenerationRequest> read_prompts_file(const std::string& path,
                                                 const SamplingParams& defaults) {
  std::ifstream file(path);
  if (!file) fail("cannot read prompts file '{}'", path);
  std::vector<GenerationRequest> requests;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      fail("{}: not valid JSON", where);
    }
    if (value.is_object()) {
      if (!value.contains("prompt_token_ids")) fail("{}: no prompt_token_ids", where);
      requests.push_back(
          {read_ids(value["prompt_token_ids"], where), read_sampling(value, defaults, where)});
    } else {
      requests.push_back({read_ids(value, where), defaults});
    }
  }
  return requests;
}

nlohmann::json logprob_list(const std::vector<TokenLogprob>& top) {
  nlohmann::json list = nlohmann::json::array();
  for (const TokenLogprob& entry : top) {
    list.push_back({{"token_id", entry.token_id}, {"logprob", entry.logprob}});
  }
  return list;
}

nlohmann::json result_json(const GenerationResult& result, const GenerationRequest& request) {
  nlohmann::json out;
  out["prompt_token_ids"] = result.prompt_token_ids;
  nlohmann::json ids = nlohmann::json::array();
  nlohmann::json logprobs = nlohmann::json::array();
  for (const SampledToken& token : result.tokens) {
    ids.push_back(token.token_id);
    logprobs.push_back({{"token_id", token.token_id},
                        {"logprob", token.logprob},
                        {"top_logprobs", logprob_list(token.top)}});
  }
  out["token_ids"] = ids;
  out["logprobs"] = logprobs;
  if (request.params.prompt_logprobs) {
    nlohmann::json prompt = nlohmann::json::array();
    for (size_t i = 0; i < result.prompt_logprobs.size(); ++i) {
      const auto& entry = result.prompt_logprobs[i];
      if (!entry) {
        prompt.push_back(nullptr);
        continue;
      }
      prompt.push_back({{"token_id", result.prompt_token_ids[i]},
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
  if (options.device != "cpu") {
    fail("--device {}: only the cpu device runs models so far", options.device);
  }
  SamplingParams defaults = options.sampling;
  defaults.seed = options.request_seed;
  std::vector<GenerationRequest> requests;
  for (const std::string& text : options.prompt_ids)
    requests.push_back({parse_id_list(text), defaults});
  if (!options.prompts_file.empty()) {
    for (auto& request : read_prompts_file(options.prompts_file, defaults)) {
      requests.push_back(std::move(request));
    }
  }
  if (requests.empty()) fail("no prompts: give --prompt-ids or --prompts-file");

  const ModelConfig config = load_model_config(options.model_dir);
  // Plan the cache before loading weights, so bad flags fail fast. Without a budget, size the
  // pool for exactly this batch.
  CacheFlags flags = options.cache;
  CacheSetup setup = plan_cache(config, nullptr, flags);
  if (flags.kv_cache_memory.empty() && !flags.num_blocks) {
    int64_t needed = kNullBlocks;
    for (const GenerationRequest& request : requests) {
      needed += blocks_to_hold(setup.plan, static_cast<int64_t>(request.prompt_token_ids.size()) +
                                               request.params.max_tokens);
    }
    flags.num_blocks = std::max(needed, setup.plan.num_blocks);
    setup = plan_cache(config, nullptr, flags);
  }

  const auto started = std::chrono::steady_clock::now();
  const LoadFormat format = parse_load_format(options.load_format);
  WeightSource weights =
      format == LoadFormat::kDummy
          ? WeightSource::dummy(options.weight_dtype == "auto" ? config.dtype.value_or(DType::kBF16)
                                                               : parse_dtype(options.weight_dtype),
                                options.seed)
          : WeightSource::from_checkpoint(options.model_dir);
  std::unique_ptr<CausalLm> model = build_causal_lm(config, weights);
  const auto loaded = std::chrono::steady_clock::now();
  const KvCache cache = allocate_kv_cache(setup.plan, Device::cpu());
  GeneratorConfig generator{.vocab_size = config.vocab_size,
                            .max_model_len = setup.plan.max_model_len,
                            .eos_token_ids = config.eos_token_ids,
                            .seed = options.seed,
                            .scheduler = options.scheduler};
  generator.scheduler.enable_prefix_caching = !options.no_prefix_caching;
  GenerationStats stats;
  const std::vector<GenerationResult> results =
      generate(*model, setup.plan, cache, generator, requests, &stats);
  const auto finished = std::chrono::steady_clock::now();

  for (size_t r = 0; r < results.size(); ++r) {
    if (options.json) {
      fmt::print("{}\n", result_json(results[r], requests[r]).dump());
    } else {
      std::vector<int32_t> ids;
      for (const SampledToken& token : results[r].tokens)
        ids.push_back(token.token_id);
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
               stats.peak_blocks_used, setup.plan.num_blocks - kNullBlocks);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* command = app.add_subcommand("generate", "Generate tokens from prompts");
  command->add_option("--model", options->model_dir, "Model directory")->required();
  command->add_option("--prompt-ids", options->prompt_ids,
                      "A prompt as comma-separated token ids; repeat for a batch");
  command->add_option(
      "--prompts-file", options->prompts_file,
      "JSONL file: one list of token ids (or {\"prompt_token_ids\": [...]}) per line");
  SamplingParams& sampling = options->sampling;
  command->add_option("--max-tokens", sampling.max_tokens, "Tokens to generate per prompt")
      ->capture_default_str();
  command->add_option("--min-tokens", sampling.min_tokens, "No EOS or stop token before this many")
      ->capture_default_str();
  command->add_option("--temperature", sampling.temperature, "0: greedy")->capture_default_str();
  command->add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str();
  command->add_option("--top-p", sampling.top_p, "Keep the most likely tokens up to this mass")
      ->capture_default_str();
  command->add_option("--min-p", sampling.min_p, "Drop tokens below this share of the top one")
      ->capture_default_str();
  command->add_option("--presence-penalty", sampling.presence_penalty)->capture_default_str();
  command->add_option("--frequency-penalty", sampling.frequency_penalty)->capture_default_str();
  command->add_option("--repetition-penalty", sampling.repetition_penalty)->capture_default_str();
  command->add_option("--stop-token-ids", sampling.stop_token_ids, "Token ids that end a request")
      ->delimiter(',');
  command->add_option("--request-seed", options->request_seed,
                      "Seed every request's sampling (the same tokens in any batch)");
  command->add_option("--seed", options->seed, "Seed of dummy weights and unseeded requests")
      ->capture_default_str();
  command->add_option("--logprobs", sampling.logprobs, "Top log-probabilities per generated token")
      ->capture_default_str();
  command->add_option("--prompt-logprobs", sampling.prompt_logprobs,
                      "Log-probabilities of the prompt tokens, with this many top alternatives");
  command->add_flag("--ignore-eos", sampling.ignore_eos, "Do not stop at end-of-sequence tokens");
  command->add_flag("--json", options->json, "One JSON object per request");
  command->add_flag("--stats", options->stats, "Print a table of batching statistics to stderr");
  command
      ->add_option("--max-num-seqs", options->scheduler.max_num_seqs,
                   "Most requests running at once")
      ->capture_default_str();
  command
      ->add_option("--max-num-batched-tokens", options->scheduler.max_num_batched_tokens,
                   "Token budget per step (longer prompts are chunked)")
      ->capture_default_str();
  command->add_flag("--no-enable-prefix-caching", options->no_prefix_caching,
                    "Do not reuse cached prompt prefixes");
  command->add_option("--device", options->device, "cpu")->capture_default_str();
  command->add_option("--load-format", options->load_format, "auto (safetensors) or dummy")
      ->capture_default_str();
  command
      ->add_option("--weight-dtype", options->weight_dtype,
                   "Dtype of dummy weights: auto (the config's), float32, bfloat16, float16")
      ->capture_default_str();
  add_cache_flags(*command, options->cache);
  command->callback([options] { run_generate(*options); });
}

}  // namespace pagoda
