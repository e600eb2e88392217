#include "cli/bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "cli/engine_flags.h"
#include "core/cuda/device_storage.h"
#include "core/error.h"
#include "core/units.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"
#include "model/architectures.h"

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

struct BenchOptions {
  int64_t batch_size = 0;
  int64_t input_len = 0;
  int64_t output_len = 0;
  int64_t num_iters = 3;
  int64_t warmup_iters = 1;
  double floor_bandwidth_gbps = 4300.0;  // H200 device-to-device copy rate (bench/attention_bench)
  bool json = false;
  SamplingParams sampling{.temperature = 0.0, .ignore_eos = true};  // greedy by default
  EngineOptions engine;
};

// One iteration's steps. A step is decode when every unfinished request had its prompt computed
// before it (each is scheduled one token); every other step is prefill, mixed ones included.
struct IterationTimes {
  double prefill_s = 0.0;
  int64_t prefill_steps = 0;
  std::vector<double> decode_s;  // per decode step
  int64_t decode_tokens = 0;     // tokens sampled in decode steps
  double end_to_end_s = 0.0;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Adds B fresh random prompts (the shared generator keeps every prompt of every iteration
// distinct, so prefix caching finds nothing), steps until all finish and releases them.
IterationTimes run_iteration(Engine& engine, const BenchOptions& options, int64_t vocab,
                             std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<GenerationRequest> requests(options.batch_size);
  for (GenerationRequest& request : requests) {
    request.params = options.sampling;
    request.params.max_tokens = options.output_len;
    for (int64_t i = 0; i < options.input_len; ++i)
      request.prompt_token_ids.push_back(token(rng));
  }
  IterationTimes times;
  const Clock::time_point started = Clock::now();
  std::vector<int64_t> ids;
  for (GenerationRequest& request : requests)
    ids.push_back(engine.add_request(std::move(request)));
  while (engine.has_unfinished()) {
    bool decode = engine.num_waiting() == 0;
    for (int64_t id : ids) {
      if (engine.status(id) != RequestStatus::kFinished &&
          engine.request(id).num_output_tokens() == 0) {
        decode = false;
      }
    }
    const Clock::time_point begin = Clock::now();
    const std::vector<RequestDelta> deltas = engine.step();
    const double step_s = seconds_since(begin);
    if (decode) {
      times.decode_s.push_back(step_s);
      for (const RequestDelta& delta : deltas)
        times.decode_tokens += static_cast<int64_t>(delta.new_tokens.size());
    } else {
      times.prefill_s += step_s;
      ++times.prefill_steps;
    }
  }
  times.end_to_end_s = seconds_since(started);
  for (int64_t id : ids) {
    // A step that threw ends its requests with an error; their times would mean nothing.
    const Request& request = engine.request(id);
    if (request.finish_reason == FinishReason::kError) fail("a request failed: {}", request.error);
    engine.release(id);
  }
  return times;
}

void check_positive(const char* flag, int64_t value) {
  if (value < 1) fail("{} {}: must be at least 1", flag, value);
}

// Checks the shape flags against the model and fits the scheduler limits to the batch: it must
// run as one batch, so --max-num-seqs and --max-num-batched-tokens are raised to B when not
// given and refused below it when given.
EngineOptions fit_engine_flags(const BenchOptions& options, const ModelConfig& config,
                               const CLI::App& command) {
  check_positive("--batch-size", options.batch_size);
  if (options.batch_size > kMaxBatchSize) {
    fail("--batch-size {}: must be at most {}", options.batch_size, kMaxBatchSize);
  }
  check_positive("--input-len", options.input_len);
  check_positive("--output-len", options.output_len);
  check_positive("--num-iters", options.num_iters);
  if (options.warmup_iters < 0) fail("--warmup-iters {}: must be at least 0", options.warmup_iters);
  if (!(options.floor_bandwidth_gbps > 0.0)) {
    fail("--floor-bandwidth-gbps {}: must be positive", options.floor_bandwidth_gbps);
  }
  SamplingParams sampling = options.sampling;
  sampling.max_tokens = options.output_len;
  sampling.validate(config.vocab_size);
  EngineOptions engine = options.engine;
  const int64_t max_model_len = engine.cache.max_model_len.value_or(config.max_position_embeddings);
  // Compared without adding first, so that lengths near 2^63 cannot wrap past the check.
  if (options.input_len > max_model_len - options.output_len) {
    fail("--input-len {} plus --output-len {} is longer than max_model_len {}", options.input_len,
         options.output_len, max_model_len);
  }
  const int64_t longest = options.input_len + options.output_len;
  // Without --max-model-len the cache is planned for the benchmark's length, not the model's.
  if (!engine.cache.max_model_len) engine.cache.max_model_len = longest;
  const auto fit = [&](const char* flag, int64_t& value) {
    if (value >= options.batch_size) return;
    if (command.get_option(flag)->count() > 0) {
      fail("{} {} is below --batch-size {}: the whole batch must run at once", flag, value,
           options.batch_size);
    }
    value = options.batch_size;
  };
  fit("--max-num-seqs", engine.scheduler.max_num_seqs);
  fit("--max-num-batched-tokens", engine.scheduler.max_num_batched_tokens);
  return engine;
}

// The dtype weights have as loaded: bf16 on a GPU; else --weight-dtype for dummy weights, else
// the config's.
DType loaded_weight_dtype(const EngineOptions& engine, const ModelConfig& config) {
  if (!engine_device(engine).is_cpu()) return DType::kBF16;
  if (parse_load_format(engine.load_format) == LoadFormat::kDummy && engine.weight_dtype != "auto")
    return parse_dtype(engine.weight_dtype);
  return config.dtype.value_or(DType::kBF16);
}

nlohmann::json or_null(bool present, double value) {
  return present ? nlohmann::json(value) : nlohmann::json(nullptr);
}

// The KV pages' dtypes, each once, in the plan's group order: "float8_e4m3, bfloat16" for e4m3
// target pages beside a draft model's bf16 ones.
std::string kv_dtypes(const KvCachePlan& plan) {
  std::vector<std::string_view> names;
  for (const KvGroup& group : plan.groups) {
    const std::string_view name = dtype_name(group.spec.page.dtype);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

// Sums the timed iterations into the reported metrics (times in ms).
nlohmann::json summarize(const std::vector<IterationTimes>& iterations, const BenchOptions& options,
                         const ModelConfig& config, const EngineOptions& engine) {
  const double n = static_cast<double>(iterations.size());
  std::vector<double> decode_ms;
  double prefill_s = 0.0, end_to_end_s = 0.0;
  int64_t prefill_steps = 0, decode_tokens = 0;
  for (const IterationTimes& it : iterations) {
    prefill_s += it.prefill_s;
    prefill_steps += it.prefill_steps;
    end_to_end_s += it.end_to_end_s;
    decode_tokens += it.decode_tokens;
    for (double s : it.decode_s)
      decode_ms.push_back(1e3 * s);
  }
  const double decode_s = std::accumulate(decode_ms.begin(), decode_ms.end(), 0.0) / 1e3;
  std::sort(decode_ms.begin(), decode_ms.end());
  const size_t count = decode_ms.size();
  const bool decoded = count > 0;
  const double mean_ms = decoded ? 1e3 * decode_s / count : 0.0;
  const double median_ms = decoded ? (decode_ms[(count - 1) / 2] + decode_ms[count / 2]) / 2 : 0.0;
  const size_t p99_rank = static_cast<size_t>(std::ceil(0.99 * count));
  const double p99_ms = decoded ? decode_ms[std::max<size_t>(p99_rank, 1) - 1] : 0.0;

  const DType dtype = loaded_weight_dtype(engine, config);
  // Under tensor parallelism each rank streams its own shard, all at once: the floor is one rank's.
  const WeightEstimate weights = estimate_rank_weights(config, engine.tensor_parallel_size);
  const bool gpu = !engine_device(engine).is_cpu();
  const QuantizationConfig quantization =
      resolve_quantization(config.quantization, engine.quantization);
  const auto bytes_of = [&](int64_t params) {
    return estimate_weight_bytes(params, weights.projection_params, dtype, quantization);
  };
  const double streamed_bytes = bytes_of(weights.streamed_params);
  const double floor_ms = 1e3 * streamed_bytes / (options.floor_bandwidth_gbps * 1e9);
  return {
      {"model", config.source},
      {"architecture", config.architecture},
      {"device", engine_device(engine).to_string()},
      {"tensor_parallel_size", engine.tensor_parallel_size},
      {"decode_context_parallel_size", engine.decode_context_parallel_size},
      {"batch_size", options.batch_size},
      {"input_len", options.input_len},
      {"output_len", options.output_len},
      {"num_iters", options.num_iters},
      {"warmup_iters", options.warmup_iters},
      {"prefill_steps", prefill_steps},
      {"decode_steps", static_cast<int64_t>(count)},
      {"prefill_time_ms", 1e3 * prefill_s / n},
      {"prefill_tokens_per_s", options.batch_size * options.input_len * n / prefill_s},
      {"decode_step_ms",
       {{"mean", or_null(decoded, mean_ms)},
        {"median", or_null(decoded, median_ms)},
        {"p99", or_null(decoded, p99_ms)}}},
      {"decode_tokens_per_s", or_null(decoded, decode_tokens / decode_s)},
      {"end_to_end_ms", 1e3 * end_to_end_s / n},
      {"weight_dtype", quantization.fp8
                           ? fmt::format("{} (projections float8_e4m3)", dtype_name(dtype))
                           : std::string(dtype_name(dtype))},
      {"weight_params", weights.params},
      {"weight_bytes", static_cast<int64_t>(bytes_of(weights.params))},
      {"streamed_weight_bytes", static_cast<int64_t>(streamed_bytes)},
      {"floor_bandwidth_gbps", or_null(gpu, options.floor_bandwidth_gbps)},
      {"weight_streaming_floor_ms", or_null(gpu, floor_ms)},
      {"decode_step_over_floor", or_null(gpu && decoded, mean_ms / floor_ms)},
  };
}

// Speculative decoding over the timed iterations: the counters of `after` less those of `before`.
// A decode step's time splits into drafting and the rest (the verify forward and acceptance).
nlohmann::json spec_json(const SpeculativeConfig& spec, const GenerationStats& before,
                         const GenerationStats& after, const nlohmann::json& report) {
  GenerationStats timed = after;
  const int64_t steps = report["decode_steps"].get<int64_t>();
  const double draft_ms =
      steps == 0 ? 0.0 : 1e3 * (after.spec_draft_seconds - before.spec_draft_seconds) / steps;
  const nlohmann::json& mean = report["decode_step_ms"]["mean"];
  timed.spec_rounds -= before.spec_rounds;
  timed.spec_draft_tokens -= before.spec_draft_tokens;
  timed.spec_accepted_tokens -= before.spec_accepted_tokens;
  std::vector<double> per_position;
  for (size_t j = 0; j < timed.spec_accepted_per_position.size(); ++j) {
    const int64_t kept = timed.spec_accepted_per_position[j] - before.spec_accepted_per_position[j];
    per_position.push_back(timed.spec_rounds == 0 ? 0.0
                                                  : static_cast<double>(kept) / timed.spec_rounds);
  }
  return {{"method", speculative_method_name(spec.method)},
          {"drafter", spec.drafter.source},
          {"num_speculative_tokens", spec.num_speculative_tokens},
          {"rounds", timed.spec_rounds},
          {"draft_tokens", timed.spec_draft_tokens},
          {"accepted_tokens", timed.spec_accepted_tokens},
          {"acceptance_rate", timed.spec_acceptance_rate()},
          {"mean_acceptance_length", timed.spec_mean_acceptance_length()},
          {"acceptance_per_position", per_position},
          {"draft_ms_per_decode_step", or_null(steps > 0, draft_ms)},
          {"verify_ms_per_decode_step",
           or_null(steps > 0, mean.is_null() ? 0.0 : mean.get<double>() - draft_ms)}};
}

// A number with `digits` decimals and its unit, or "-" for null.
std::string number(const nlohmann::json& value, int digits, const char* unit = "") {
  return value.is_null() ? "-" : fmt::format("{:.{}f}{}", value.get<double>(), digits, unit);
}

// ", TP 2 x DCP 2 ranks" and the like; empty for one rank.
std::string ranks_text(const nlohmann::json& r) {
  const int64_t tp = r["tensor_parallel_size"].get<int64_t>();
  const int64_t dcp = r["decode_context_parallel_size"].get<int64_t>();
  if (tp == 1 && dcp == 1) return "";
  if (dcp == 1) return fmt::format(", TP {}", tp);
  if (tp == 1) return fmt::format(", DCP {}", dcp);
  return fmt::format(", TP {} x DCP {}", tp, dcp);
}

void print_table(const nlohmann::json& r) {
  const nlohmann::json& step = r["decode_step_ms"];
  std::vector<std::pair<std::string, std::string>> rows = {
      {"model",
       fmt::format("{} ({}) on {}{}", r["architecture"].get<std::string>(),
                   r["model"].get<std::string>(), r["device"].get<std::string>(), ranks_text(r))},
      {"batch x input -> output",
       fmt::format("{} x {} -> {}; iterations: {} timed, {} warmup", r["batch_size"].dump(),
                   r["input_len"].dump(), r["output_len"].dump(), r["num_iters"].dump(),
                   r["warmup_iters"].dump())},
      {"steps (all timed iterations)",
       fmt::format("{} prefill, {} decode", r["prefill_steps"].dump(), r["decode_steps"].dump())},
      {"prefill time per iteration", number(r["prefill_time_ms"], 3, " ms")},
      {"prefill throughput", number(r["prefill_tokens_per_s"], 1, " tok/s")},
      {"decode step mean / median / p99",
       fmt::format("{} / {} / {}", number(step["mean"], 3), number(step["median"], 3),
                   number(step["p99"], 3, " ms"))},
      {"decode throughput", number(r["decode_tokens_per_s"], 1, " tok/s")},
      {"end-to-end per iteration", number(r["end_to_end_ms"], 3, " ms")},
      {r["tensor_parallel_size"] == 1 ? "weights (dense-decoder estimate)"
                                      : "weights of one rank (dense-decoder estimate)",
       fmt::format("{} {} ({:.1f} M params); {} read per decode step",
                   format_bytes(r["weight_bytes"]), r["weight_dtype"].get<std::string>(),
                   r["weight_params"].get<double>() / 1e6,
                   format_bytes(r["streamed_weight_bytes"]))},
      {"KV cache dtype", r["kv_cache_dtype"].get<std::string>()},
  };
  if (!r["weight_streaming_floor_ms"].is_null()) {
    rows.emplace_back("weight-streaming floor",
                      fmt::format("{} at {} GB/s; decode step mean = {} floor",
                                  number(r["weight_streaming_floor_ms"], 3, " ms"),
                                  number(r["floor_bandwidth_gbps"], 0),
                                  number(r["decode_step_over_floor"], 2, "x")));
  }
  if (const nlohmann::json& spec = r["speculative"]; !spec.is_null()) {
    std::string per_position;
    for (const nlohmann::json& share : spec["acceptance_per_position"])
      per_position +=
          fmt::format("{}{:.3f}", per_position.empty() ? "" : ", ", share.get<double>());
    rows.emplace_back(
        "speculative decoding",
        fmt::format("{}, K = {}: {} rounds, acceptance {:.1f}%, mean length {:.3f}; "
                    "per position {}",
                    spec["method"].get<std::string>(), spec["num_speculative_tokens"].dump(),
                    spec["rounds"].dump(), 100 * spec["acceptance_rate"].get<double>(),
                    spec["mean_acceptance_length"].get<double>(), per_position));
    rows.emplace_back("decode step: drafting / verifying",
                      fmt::format("{} / {}", number(spec["draft_ms_per_decode_step"], 3),
                                  number(spec["verify_ms_per_decode_step"], 3, " ms")));
  }
  fmt::print("| metric | value |\n|---|---|\n");
  for (const auto& [metric, value] : rows)
    fmt::print("| {} | {} |\n", metric, value);
}

void run_bench(const BenchOptions& options, const CLI::App& command) {
  const std::string model_dir = options.engine.paths.model();
  const ModelConfig config = load_model_config(model_dir);
  const EngineOptions engine_flags = fit_engine_flags(options, config, command);
  const EngineModels models = engine_models(model_dir, engine_flags);
  // Plan before loading weights, so bad flags fail fast. Without a budget, the pool holds exactly
  // the batch.
  const std::vector<int64_t> lengths(options.batch_size, options.input_len + options.output_len);
  const KvCachePlan plan = plan_cache(models.planned, models.drafter(),
                                      engine_cache_config(engine_flags, models), lengths);

  const Clock::time_point load_start = Clock::now();
  RankModels ranks = load_model(models, engine_flags);
  ranks.allocate_caches(plan);
  fmt::print(stderr, "loaded in {:.2f} s\n", seconds_since(load_start));
  Engine engine(ranks.model(), plan, ranks.cache(),
                ranks.with_ranks(engine_config(config, plan, engine_flags)), ranks.drafter());
  std::mt19937_64 rng(engine_flags.seed);
  for (int64_t i = 0; i < options.warmup_iters; ++i)
    run_iteration(engine, options, config.vocab_size, rng);
  const GenerationStats before = engine.stats();
  std::vector<IterationTimes> timed;
  const bool gpu = !ranks.devices.front().is_cpu();
  if (gpu) cuda::profile_range(true);  // what ncu --profile-from-start off records
  for (int64_t i = 0; i < options.num_iters; ++i)
    timed.push_back(run_iteration(engine, options, config.vocab_size, rng));
  if (gpu) cuda::profile_range(false);
  if (engine.stats().preemptions > 0) {
    fmt::print(stderr, "warning: {} preemptions; the KV pool did not hold the whole batch\n",
               engine.stats().preemptions);
  }
  nlohmann::json report = summarize(timed, options, config, engine_flags);
  report["kv_cache_dtype"] = kv_dtypes(plan);
  report["speculative"] = nlohmann::json(nullptr);
  if (models.speculative) {
    report["speculative"] = spec_json(*models.speculative, before, engine.stats(), report);
  }
  if (options.json) {
    fmt::print("{}\n", report.dump());
  } else {
    print_table(report);
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command =
      app.add_subcommand("bench", "Latency and throughput of one batch through the engine");
  command->add_option("--model", options->engine.paths.model_dir,
                      "Model directory (default: the embedded models/kjv-gemma4)");
  command->add_option("--batch-size", options->batch_size, "Requests in the batch (B)")->required();
  command->add_option("--input-len", options->input_len, "Random prompt tokens per request (I)")
      ->required();
  command->add_option("--output-len", options->output_len, "Tokens generated per request (O)")
      ->required();
  command->add_option("--num-iters", options->num_iters, "Timed iterations")->capture_default_str();
  command->add_option("--warmup-iters", options->warmup_iters, "Untimed iterations first")
      ->capture_default_str();
  command
      ->add_option("--floor-bandwidth-gbps", options->floor_bandwidth_gbps,
                   "GPU copy bandwidth (GB/s) for the weight-streaming floor")
      ->capture_default_str();
  command->add_flag("--json", options->json, "One JSON object instead of a table");
  add_sampling_filter_flags(*command, options->sampling);
  add_engine_flags(*command, options->engine);
  command->callback([options, command] { run_bench(*options, *command); });
}

}  // namespace pagoda
