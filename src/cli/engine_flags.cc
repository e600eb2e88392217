#include "cli/engine_flags.h"

#include <filesystem>

#include "cli/prompts.h"
#include "core/error.h"
#include "core/files.h"
#include "model/safetensors.h"
#include "parallel/cpu_communicator.h"
#include "parallel/nccl_communicator.h"

namespace pagoda {

std::string ModelFlags::model() const {
  return model_dir_or_default(model_dir);
}

std::string ModelFlags::tokenizer() const {
  return tokenizer_dir.empty() ? model() : tokenizer_dir;
}

Tokenizer ModelFlags::load_tokenizer() const {
  Tokenizer loaded = Tokenizer::load(tokenizer());
  if (chat_template.empty()) return loaded;
  // As vLLM reads the flag: a file when one exists, else the template itself if it looks like one.
  if (std::filesystem::is_regular_file(chat_template)) {
    loaded.set_chat_template(read_text_file(chat_template));
  } else if (chat_template.find('{') != std::string::npos) {
    loaded.set_chat_template(chat_template);
  } else {
    fail("--chat-template: no file '{}', and it is not a template (it has no '{{')", chat_template);
  }
  return loaded;
}

void add_chat_template_flag(CLI::App& command, ModelFlags& flags) {
  command.add_option("--chat-template", flags.chat_template,
                     "Chat template (Jinja) to use instead of the model's: a file, or the template "
                     "itself");
}

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  command.add_option("--model", flags.model_dir,
                     "Model directory (default: the embedded models/kjv-gemma4)");
  command.add_option("--tokenizer", flags.tokenizer_dir,
                     "Directory of tokenizer.json (default: the model's)");
}

void add_engine_flags(CLI::App& command, EngineFlags& flags) {
  command.add_flag("--check-weights", flags.check_weights,
                   "Read every weight first and refuse NaN or infinite values, naming the tensors");
  command.add_option("--seed", flags.seed, "Seed of dummy weights and unseeded requests")
      ->capture_default_str();
  command
      .add_option("--max-num-seqs", flags.scheduler.max_num_seqs, "Most requests running at once")
      ->capture_default_str();
  command
      .add_option("--max-num-batched-tokens", flags.scheduler.max_num_batched_tokens,
                  "Token budget per step (longer prompts are chunked)")
      ->capture_default_str();
  command.add_flag("--no-enable-prefix-caching", flags.no_prefix_caching,
                   "Do not reuse cached prompt prefixes");
  command.add_option("--device", flags.device, "cpu, cuda or cuda:N")->capture_default_str();
  command
      .add_option("--gpu-memory-utilization", flags.gpu_memory_utilization,
                  "Share of the GPU's memory to use; the KV cache takes what the model leaves")
      ->check(CLI::Range(0.05, 1.0))
      ->capture_default_str();
  command.add_flag("--enforce-eager", flags.enforce_eager,
                   "On a GPU, run decode steps without CUDA graphs");
  command.add_option("--load-format", flags.load_format, "auto (safetensors) or dummy")
      ->capture_default_str();
  command
      .add_option("--quantization", flags.quantization,
                  "Projection weights: auto (as the checkpoint stores them), fp8 (FP8 e4m3 in "
                  "128 x 128 blocks, quantized at load unless stored so), none")
      ->capture_default_str();
  command
      .add_option("--weight-dtype", flags.weight_dtype,
                  "Dtype of dummy weights: auto (the config's), float32, bfloat16, float16")
      ->capture_default_str();
  command.add_option(
      "--speculative-config", flags.speculative_config,
      "Speculative decoding, as vLLM spells it: '{\"method\": \"mtp\" | "
      "\"draft_model\", \"model\": DIR, \"num_speculative_tokens\": K}' (method and, "
      "for the model's own assistant, model may be left out)");
  command
      .add_option("--tensor-parallel-size", flags.tensor_parallel_size,
                  "Ranks the model is split over (attention heads and MLP columns; on the CPU, "
                  "threads of this process)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      .add_option("--decode-context-parallel-size", flags.decode_context_parallel_size,
                  "Ranks each sequence's KV cache is dealt over (decode context parallelism; 1, or "
                  "the tensor-parallel size, or alone with whole weights on each rank)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      .add_option("--dcp-kv-cache-interleave-size", flags.dcp_kv_cache_interleave_size,
                  "Tokens dealt to one context-parallel rank at a time; divides --block-size")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  add_cache_flags(command, flags.cache);
}

void add_sampling_filter_flags(CLI::App& command, SamplingParams& sampling) {
  command.add_option("--temperature", sampling.temperature, "0: greedy")->capture_default_str();
  command.add_option("--top-k", sampling.top_k, "Keep the k most likely tokens (0: all)")
      ->capture_default_str();
  command.add_option("--top-p", sampling.top_p, "Keep the most likely tokens up to this mass")
      ->capture_default_str();
  command.add_option("--min-p", sampling.min_p, "Drop tokens below this share of the top one")
      ->capture_default_str();
}

Device engine_device(const EngineFlags& flags) {
  const Device device = parse_device(flags.device);
  if (device.is_cpu()) return device;
  if (!built_with_cuda()) {
    fail("--device {}: this pagoda binary was built without CUDA", flags.device);
  }
  if (device.index >= cuda_device_count()) {
    fail("--device {}: this machine has {} CUDA device(s)", flags.device, cuda_device_count());
  }
  return device;
}

CacheConfig engine_cache_config(const EngineFlags& flags, const ModelConfig& target) {
  CacheConfig config = parse_cache_flags(flags.cache);
  config.max_num_batched_tokens = flags.scheduler.max_num_batched_tokens;
  config.context_parallel_size = flags.decode_context_parallel_size;
  config.context_interleave = flags.dcp_kv_cache_interleave_size;
  return resolve_cache_config(config, target, engine_device(flags));
}

namespace {

// Error naming the tensors (the first few) that hold NaN or infinite values.
void check_weights_finite(const std::string& model_dir) {
  const std::vector<NonFiniteTensor> bad = find_non_finite(Checkpoint::open(model_dir));
  if (bad.empty()) return;
  std::string list;
  for (size_t i = 0; i < std::min<size_t>(bad.size(), 3); ++i) {
    list += fmt::format("{}{} ({} values, the first at index {})", i ? ", " : "", bad[i].name,
                        bad[i].count, bad[i].first);
  }
  fail("--check-weights: {} tensor{} of {} hold NaN or infinite values: {}{}", bad.size(),
       bad.size() == 1 ? "" : "s", model_dir, list, bad.size() > 3 ? ", ..." : "");
}

// The dtype of dummy weights for `config`, or nullopt when the checkpoint's weights load.
std::optional<DType> dummy_dtype(const ModelConfig& config, const EngineFlags& flags) {
  if (parse_load_format(flags.load_format) != LoadFormat::kDummy) return std::nullopt;
  return flags.weight_dtype == "auto" ? config.dtype.value_or(DType::kBF16)
                                      : parse_dtype(flags.weight_dtype);
}

}  // namespace

RankModels load_model(const EngineModels& models, const EngineFlags& flags) {
  const Device device = engine_device(flags);
  const ModelConfig& config = models.target;
  const std::optional<DType> dummy = dummy_dtype(config, flags);
  if (flags.check_weights && !dummy) check_weights_finite(models.model_dir);
  const int ranks = static_cast<int>(models.ranks());
  RankModels out;
  // On GPUs, rank r on the r-th GPU from the one --device names, over NCCL; on the CPU, threads.
  for (int r = 0; r < ranks; ++r)
    out.devices.push_back(device.is_cpu() ? device : Device::cuda(device.index + r));
  // A group of ranks [first, first + count): threads on the CPU, NCCL on GPUs.
  const auto make_group = [&](int first, int count) {
    if (device.is_cpu()) return make_cpu_group(count);
    std::vector<int> gpus;
    for (int r = first; r < first + count; ++r)
      gpus.push_back(out.devices[r].index);
    return make_nccl_group(gpus);
  };
  if (ranks > 1) out.communicators = make_group(0, ranks);
  const int64_t tp = models.tensor_parallel_size;
  const int64_t dcp = models.decode_context_parallel_size;
  if (has_context_groups(tp, dcp)) {
    for (int first = 0; first < ranks; first += static_cast<int>(dcp)) {
      for (std::unique_ptr<Communicator>& comm : make_group(first, static_cast<int>(dcp)))
        out.context_communicators.push_back(std::move(comm));
    }
  }
  const auto place = [&](int r) {
    return rank_place(
        tp, dcp, r, ranks > 1 ? out.communicators[r].get() : nullptr,
        out.context_communicators.empty() ? nullptr : out.context_communicators[r].get());
  };
  for (int r = 0; r < ranks; ++r) {
    const CurrentDevice current(out.devices[r]);
    WeightSource weights = dummy ? WeightSource::dummy(*dummy, flags.seed)
                                 : WeightSource::from_checkpoint(models.model_dir);
    weights.set_device(out.devices[r]);
    out.models.push_back(build_causal_lm(config, weights, place(r)));
  }
  if (!models.speculative) return out;
  const std::optional<DType> drafter_dummy = dummy_dtype(models.speculative->drafter, flags);
  if (flags.check_weights && !drafter_dummy) check_weights_finite(models.speculative->model_dir);
  for (int r = 0; r < ranks; ++r) {
    const CurrentDevice current(out.devices[r]);
    out.drafters.push_back(std::make_unique<Drafter>(
        load_drafter(*models.speculative, out.devices[r], drafter_dummy, flags.seed, place(r))));
  }
  return out;
}

void RankModels::allocate_caches(const KvCachePlan& plan) {
  caches.clear();
  for (const Device& device : devices) {
    const CurrentDevice current(device);
    caches.push_back(allocate_kv_cache(plan, device));
  }
}

EngineConfig RankModels::with_ranks(EngineConfig config) const {
  if (models.size() == 1) return config;
  const auto context = [&](size_t r) {
    return context_communicators.empty() ? nullptr : context_communicators[r].get();
  };
  config.communicator = communicators[0].get();
  config.context_communicator = context(0);
  for (size_t r = 1; r < models.size(); ++r) {
    config.other_ranks.push_back({.model = models[r].get(),
                                  .cache = &caches[r],
                                  .communicator = communicators[r].get(),
                                  .context_communicator = context(r),
                                  .drafter = drafters.empty() ? nullptr : drafters[r].get()});
  }
  return config;
}

EngineConfig engine_config(const ModelConfig& config, const KvCachePlan& plan,
                           const EngineFlags& flags) {
  EngineConfig engine{.vocab_size = config.vocab_size,
                      .max_model_len = plan.max_model_len,
                      .eos_token_ids = config.eos_token_ids,
                      .seed = flags.seed,
                      .scheduler = flags.scheduler,
                      .enforce_eager = flags.enforce_eager};
  engine.scheduler.enable_prefix_caching = !flags.no_prefix_caching;
  return engine;
}

EngineModels engine_models(const std::string& model_dir, const EngineFlags& flags) {
  EngineModels models{.model_dir = model_dir, .target = load_model_config(model_dir)};
  models.target.quantization = resolve_quantization(models.target.quantization, flags.quantization);
  const int64_t tp = flags.tensor_parallel_size;
  const int64_t dcp = flags.decode_context_parallel_size;
  check_tensor_parallel(models.target, tp);
  check_context_parallel(tp, dcp, flags.dcp_kv_cache_interleave_size);
  const std::string parallel =
      fmt::format("--tensor-parallel-size {} --decode-context-parallel-size {}", tp, dcp);
  const Device device = engine_device(flags);
  if (world_size(tp, dcp) > 1 && !device.is_cpu()) {
    if (!nccl_available_in_build()) {
      fail("{} on GPUs needs NCCL, which this pagoda binary was built without", parallel);
    }
    if (device.index + world_size(tp, dcp) > cuda_device_count()) {
      fail("{} needs {} GPUs from {}; this machine has {}", parallel, world_size(tp, dcp),
           device.to_string(), cuda_device_count());
    }
  }
  models.tensor_parallel_size = tp;
  models.decode_context_parallel_size = dcp;
  models.planned = rank_model_config(models.target, tp, dcp);
  if (flags.speculative_config.empty()) return models;
  models.speculative = parse_speculative_config(flags.speculative_config, model_dir, models.target);
  check_tensor_parallel(models.speculative->drafter, tp);
  models.planned_drafter = rank_model_config(models.speculative->drafter, tp, dcp);
  return models;
}

std::string describe_spec_stats(const GenerationStats& stats) {
  std::string per_position;
  for (size_t j = 0; j < stats.spec_accepted_per_position.size(); ++j) {
    per_position += fmt::format(
        "{}{:.3f}", j ? ", " : "",
        stats.spec_rounds == 0
            ? 0.0
            : static_cast<double>(stats.spec_accepted_per_position[j]) / stats.spec_rounds);
  }
  return fmt::format(
      "spec rounds         {} (mean acceptance length {:.3f})\n"
      "draft tokens        {} proposed, {} accepted ({:.1f}%)\n"
      "accepted/position   {}\n",
      stats.spec_rounds, stats.spec_mean_acceptance_length(), stats.spec_draft_tokens,
      stats.spec_accepted_tokens, 100.0 * stats.spec_acceptance_rate(), per_position);
}

}  // namespace pagoda
