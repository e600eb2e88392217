#include "engine/engine_options.h"

#include <charconv>

#include "core/error.h"
#include "core/files.h"
#include "core/units.h"
#include "model/safetensors.h"
#include "parallel/cpu_communicator.h"
#include "parallel/nccl_communicator.h"

namespace pagoda {

std::string model_dir_or_default(const std::string& model_dir) {
  if (!model_dir.empty()) return model_dir;
  for (const std::string fallback : {PAGODA_DEFAULT_MODEL, PAGODA_INSTALLED_MODEL}) {
    if (path_exists(fallback + "/config.json")) return fallback;
  }
  fail("no --model given, and the default model is neither at '{}' nor at '{}'",
       PAGODA_DEFAULT_MODEL, PAGODA_INSTALLED_MODEL);
}

std::string ModelPaths::model() const {
  return model_dir_or_default(model_dir);
}

std::string ModelPaths::tokenizer() const {
  return tokenizer_dir.empty() ? model() : tokenizer_dir;
}

Tokenizer ModelPaths::load_tokenizer() const {
  Tokenizer loaded = Tokenizer::load(tokenizer());
  if (chat_template.empty()) return loaded;
  // As vLLM reads the flag: a file when one exists, else the template itself if it looks like one.
  if (is_regular_file_path(chat_template)) {
    loaded.set_chat_template(read_text_file(chat_template));
  } else if (chat_template.find('{') != std::string::npos) {
    loaded.set_chat_template(chat_template);
  } else {
    fail("--chat-template: no file '{}', and it is not a template (it has no '{{')", chat_template);
  }
  return loaded;
}

namespace {

// parse_dtype's result; Error naming `flag` for a name that is no dtype.
DType parse_dtype_flag(const std::string& name, std::string_view flag) {
  try {
    return parse_dtype(name);
  } catch (const Error& error) {
    fail("{} {}: {}", flag, name, error.what());
  }
}

}  // namespace

CacheConfig parse_cache_options(const CacheOptions& flags) {
  CacheConfig config;
  if (flags.dtype != "auto") {
    config.dtype = parse_dtype_flag(flags.dtype, "--dtype");
    if (!is_floating(*config.dtype)) {
      fail(
          "--dtype {} is not a floating type; expected auto, float32, bfloat16 or float16 (an FP8 "
          "cache is --kv-cache-dtype fp8)",
          flags.dtype);
    }
  }
  if (flags.kv_cache_dtype != "auto") {
    config.dtype = parse_kv_cache_dtype(flags.kv_cache_dtype, "--kv-cache-dtype");
  }
  for (const std::string& item : flags.kv_cache_dtype_skip_layers) {
    if (item == "sliding_window") {
      config.dtype_skips.sliding_window = true;
      continue;
    }
    int64_t index = -1;
    const char* end = item.data() + item.size();
    const auto [at, error] = std::from_chars(item.data(), end, index);
    if (error != std::errc() || at != end || index < 0) {
      fail("--kv-cache-dtype-skip-layers {}: expected sliding_window or a layer index",
           item.substr(0, 40));
    }
    config.dtype_skips.layers.push_back(index);
  }
  if (flags.attention_backend != "auto") {
    config.backend = &find_attention_backend(flags.attention_backend);
  }
  config.block_size = flags.block_size;
  config.max_model_len = flags.max_model_len;
  if (!flags.kv_cache_memory.empty()) config.memory_bytes = parse_byte_size(flags.kv_cache_memory);
  config.num_blocks = flags.num_blocks;
  config.layout = parse_kv_buffer_layout(flags.buffer_layout);
  return config;
}

Device engine_device(const EngineOptions& flags) {
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

CacheConfig engine_cache_config(const EngineOptions& flags, const EngineModels& models) {
  // Written so that NaN fails too.
  if (!(flags.gpu_memory_utilization >= 0.05 && flags.gpu_memory_utilization <= 1.0)) {
    fail("--gpu-memory-utilization {}: it must be in [0.05, 1]", flags.gpu_memory_utilization);
  }
  CacheConfig config = parse_cache_options(flags.cache);
  config.max_num_batched_tokens = flags.scheduler.max_num_batched_tokens;
  config.context_parallel_size = flags.decode_context_parallel_size;
  config.context_interleave = flags.dcp_kv_cache_interleave_size;
  if (models.speculative) config.draft_dtype = models.speculative->kv_cache_dtype;
  return resolve_cache_config(config, models.planned, engine_device(flags));
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
std::optional<DType> dummy_dtype(const ModelConfig& config, const EngineOptions& flags) {
  if (parse_load_format(flags.load_format) != LoadFormat::kDummy) return std::nullopt;
  return flags.weight_dtype == "auto" ? config.dtype.value_or(DType::kBF16)
                                      : parse_dtype_flag(flags.weight_dtype, "--weight-dtype");
}

}  // namespace

RankModels load_model(const EngineModels& models, const EngineOptions& flags) {
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
                           const EngineOptions& flags) {
  EngineConfig engine{.vocab_size = config.vocab_size,
                      .max_model_len = plan.max_model_len,
                      .eos_token_ids = config.eos_token_ids,
                      .seed = flags.seed,
                      .scheduler = flags.scheduler,
                      .enforce_eager = flags.enforce_eager};
  engine.scheduler.enable_prefix_caching = !flags.no_prefix_caching;
  return engine;
}

GenerationDefaults generation_defaults(const ModelConfig& target, const std::string& flag) {
  if (flag == "auto") return target.generation;
  if (flag == "vllm") return {};
  const std::string path = flag + "/generation_config.json";
  if (!path_exists(path)) {
    fail("--generation-config {}: expected auto, vllm, or a directory with generation_config.json",
         flag);
  }
  ModelConfig read = target;
  read.generation = {};
  read_generation_config(read_json_file(path), path, read);
  return read.generation;
}

EngineModels engine_models(const std::string& model_dir, const EngineOptions& flags) {
  EngineModels models{.model_dir = model_dir, .target = load_model_config(model_dir)};
  models.target.quantization = resolve_quantization(models.target.quantization, flags.quantization);
  models.target.generation = generation_defaults(models.target, flags.generation_config);
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

}  // namespace pagoda
