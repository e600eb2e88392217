#include "cli/generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cache_flags.h"
#include "core/error.h"
#include "engine/generator.h"

namespace pagoda {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::vector<std::string> prompt_ids;  // each "1,2,3"
  std::string prompts_file;             // JSONL: [ids] or {"prompt_token_ids": [ids]} per line
  int64_t max_tokens = 16;
  double temperature = 0.0;
  uint64_t seed = 0;
  int64_t logprobs = 0;
  std::optional<int64_t> prompt_logprobs;
  bool ignore_eos = false;
  bool json = false;
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

std::vector<std::vector<int32_t>> read_prompts_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) fail("cannot read prompts file '{}'", path);
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      fail("{}:{}: not valid JSON", path, number);
    }
    if (value.is_object() && value.contains("prompt_token_ids")) value = value["prompt_token_ids"];
    std::vector<int32_t> ids;
    if (!value.is_array()) fail("{}:{}: expected a list of token ids", path, number);
    for (const auto& id : value) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        fail("{}:{}: {} is not a token id", path, number, id.dump());
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
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
  if (request.prompt_logprobs) {
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
  out["finish_reason"] = result.finish_reason;
  return out;
}

void run_generate(const GenerateOptions& options) {
  if (options.temperature != 0.0) {
    fail("--temperature {}: only greedy decoding (temperature 0) exists so far",
         options.temperature);
  }
  if (options.device != "cpu")
    fail("--device {}: only the cpu device runs models so far", options.device);
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : options.prompt_ids)
    prompts.push_back(parse_id_list(text));
  if (!options.prompts_file.empty()) {
    for (auto& ids : read_prompts_file(options.prompts_file))
      prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) fail("no prompts: give --prompt-ids or --prompts-file");
  for (auto& ids : prompts) {
    requests.push_back({.prompt_token_ids = std::move(ids),
                        .max_tokens = options.max_tokens,
                        .logprobs = options.logprobs,
                        .prompt_logprobs = options.prompt_logprobs,
                        .ignore_eos = options.ignore_eos});
  }

  const ModelConfig config = load_model_config(options.model_dir);
  // Plan the cache before loading weights, so bad flags fail fast. Without a budget, size the
  // pool for exactly this batch.
  CacheFlags flags = options.cache;
  CacheSetup setup = plan_cache(config, nullptr, flags);
  if (flags.kv_cache_memory.empty() && !flags.num_blocks) {
    int64_t needed = kNullBlocks;
    for (const GenerationRequest& request : requests) {
      needed += blocks_to_hold(
          setup.plan, static_cast<int64_t>(request.prompt_token_ids.size()) + request.max_tokens);
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
  const GeneratorLimits limits{.vocab_size = config.vocab_size,
                               .max_model_len = setup.plan.max_model_len,
                               .eos_token_ids = config.eos_token_ids};
  const std::vector<GenerationResult> results =
      generate(*model, setup.plan, cache, limits, requests);
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
  command->add_option("--max-tokens", options->max_tokens, "Tokens to generate per prompt")
      ->capture_default_str();
  command->add_option("--temperature", options->temperature, "0 for greedy (the only mode yet)")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "Seed (dummy weights)")->capture_default_str();
  command->add_option("--logprobs", options->logprobs, "Top log-probabilities per generated token")
      ->capture_default_str();
  command->add_option("--prompt-logprobs", options->prompt_logprobs,
                      "Log-probabilities of the prompt tokens, with this many top alternatives");
  command->add_flag("--ignore-eos", options->ignore_eos, "Do not stop at end-of-sequence tokens");
  command->add_flag("--json", options->json, "One JSON object per request");
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
