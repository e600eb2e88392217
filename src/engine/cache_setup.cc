#include "engine/cache_setup.h"

#include "core/error.h"
#include "core/units.h"

namespace pagoda {
namespace {

DType choose_dtype(const std::string& requested, const ModelConfig& target) {
  if (requested == "auto") return target.dtype.value_or(DType::kBF16);
  const DType dtype = parse_dtype(requested);
  if (!is_floating(dtype)) {
    fail("--dtype {} is not a floating type; expected auto, float32, bfloat16 or float16",
         requested);
  }
  return dtype;
}

}  // namespace

CacheSetup plan_cache(const ModelConfig& target, const ModelConfig* drafter,
                      const CacheFlags& flags) {
  CacheSetup setup;
  setup.dtype = choose_dtype(flags.dtype, target);
  setup.backend = &find_attention_backend(
      flags.attention_backend == "auto" ? std::string("cpu") : flags.attention_backend);

  KvCacheOptions cache;
  cache.max_model_len = flags.max_model_len.value_or(target.max_position_embeddings);
  if (cache.max_model_len > target.max_position_embeddings) {
    fail("--max-model-len {} is longer than the model's max_position_embeddings ({}) in {}",
         cache.max_model_len, target.max_position_embeddings, target.source);
  }
  if (!flags.kv_cache_memory.empty()) cache.memory_bytes = parse_byte_size(flags.kv_cache_memory);
  cache.num_blocks = flags.num_blocks;
  cache.max_tokens_per_step = flags.max_num_batched_tokens;
  cache.layout = parse_kv_buffer_layout(flags.buffer_layout);
  const KvLayerOptions layer_options{
      .block_size = flags.block_size, .dtype = setup.dtype, .backend = setup.backend};
  setup.plan = plan_kv_cache(build_kv_layers(target, drafter, layer_options), cache);
  return setup;
}

}  // namespace pagoda
