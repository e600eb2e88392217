#include "engine/cache_config.h"

#include "core/error.h"

namespace pagoda {

bool is_kv_cache_dtype(DType dtype) {
  return is_floating(dtype) || dtype == DType::kF8E4M3;
}

std::optional<DType> parse_kv_cache_dtype(std::string_view name, std::string_view what) {
  if (name == "auto") return std::nullopt;
  std::optional<DType> dtype;
  if (name == "fp8_e4m3") {
    dtype = DType::kF8E4M3;  // vLLM's other spelling
  } else {
    try {
      dtype = parse_dtype(name);
    } catch (const Error&) {
    }
  }
  if (!dtype || !is_kv_cache_dtype(*dtype)) {
    fail("{} {}: expected auto, bfloat16, float16, float32 or fp8", what, name.substr(0, 40));
  }
  return dtype;
}

namespace {

// Error unless the skips keep layers of `target` out of an fp8 cache: indices of layers that own
// KV.
void check_dtype_skips(const CacheConfig& config, const ModelConfig& target) {
  if (*config.dtype != DType::kF8E4M3) {
    fail("--kv-cache-dtype-skip-layers keeps layers out of an fp8 KV cache; the cache is {}",
         dtype_name(*config.dtype));
  }
  const int64_t count = static_cast<int64_t>(target.layers.size());
  for (const int64_t index : config.dtype_skips.layers) {
    if (index < 0 || index >= count) {
      fail("--kv-cache-dtype-skip-layers: layer {} does not exist ({} has layers 0 to {})", index,
           target.source, count - 1);
    }
    const LayerAttentionConfig& layer = target.layers[index];
    if (layer.kv_source == KvSource::kEarlierLayer) {
      fail(
          "--kv-cache-dtype-skip-layers: layer {} ({}) reads the KV of layer {} and keeps none of "
          "its own; skip that layer instead",
          index, layer.name, layer.kv_source_layer);
    }
    if (layer.kv_source != KvSource::kOwn) {
      fail("--kv-cache-dtype-skip-layers: layer {} ({}) keeps no KV of its own", index, layer.name);
    }
  }
}

}  // namespace

CacheConfig resolve_cache_config(CacheConfig config, const ModelConfig& target, Device device) {
  if (config.backend == nullptr) {
    config.backend = &default_attention_backend(device.type);
  } else if (config.backend->device_type() != device.type) {
    fail("attention backend '{}' does not run on {}; leave it unset or name {}",
         config.backend->name(), device.to_string(), default_attention_backend(device.type).name());
  }
  // What auto gives: bfloat16 on a GPU, else the target's dtype (else bfloat16).
  const DType automatic = device.is_cpu() ? target.dtype.value_or(DType::kBF16) : DType::kBF16;
  if (!config.dtype) config.dtype = automatic;
  if (!config.dtype_skips.empty()) check_dtype_skips(config, target);
  if (!config.skip_dtype) config.skip_dtype = automatic;
  for (const std::optional<DType>& dtype : {config.dtype, config.draft_dtype, config.skip_dtype}) {
    if (dtype && !is_kv_cache_dtype(*dtype)) {
      fail(
          "KV cache dtype {} is not one a cache is kept in; expected float32, bfloat16, float16 "
          "or float8_e4m3",
          dtype_name(*dtype));
    }
  }
  const int64_t max_model_len = config.max_model_len.value_or(target.max_position_embeddings);
  if (max_model_len > target.max_position_embeddings) {
    fail("--max-model-len {} is longer than the model's max_position_embeddings ({}) in {}",
         max_model_len, target.max_position_embeddings, target.source);
  }
  config.max_model_len = max_model_len;
  return config;
}

KvCachePlan plan_cache(const ModelConfig& target, const ModelConfig* drafter,
                       const CacheConfig& config, std::span<const int64_t> sequences) {
  PAGODA_CHECK(config.backend != nullptr && config.dtype && config.max_model_len,
               "plan_cache needs a resolved cache config");
  const KvCacheOptions options{.memory_bytes = config.memory_bytes,
                               .num_blocks = config.num_blocks,
                               .max_model_len = *config.max_model_len,
                               .max_tokens_per_step = config.max_num_batched_tokens,
                               .sequences = {sequences.begin(), sequences.end()},
                               .layout = config.layout,
                               .context_parallel_size = config.context_parallel_size,
                               .context_interleave = config.context_interleave};
  const KvLayerOptions layers{.block_size = config.block_size,
                              .dtype = *config.dtype,
                              .draft_dtype = config.draft_dtype,
                              .skips = config.dtype_skips,
                              .skip_dtype = config.skip_dtype.value_or(*config.dtype),
                              .backend = config.backend};
  return plan_kv_cache(build_kv_layers(target, drafter, layers), options);
}

int64_t gpu_kv_cache_budget(Device device, double utilization) {
  constexpr int64_t kActivationReserve = int64_t{2} << 30;
  const auto [free, total] = cuda_memory_info(device);
  const int64_t allowed = static_cast<int64_t>(utilization * static_cast<double>(total));
  const int64_t budget = allowed - (total - free) - kActivationReserve;
  if (budget <= 0) {
    fail(
        "--gpu-memory-utilization {}: {} of {} bytes are in use after loading the model, leaving "
        "no room for a KV cache",
        utilization, total - free, total);
  }
  return budget;
}

}  // namespace pagoda
