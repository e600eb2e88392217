#include "cli/cache_flags.h"

#include "core/error.h"
#include "core/units.h"

namespace pagoda {

void add_cache_flags(CLI::App& command, CacheFlags& flags) {
  auto* memory = command.add_option("--kv-cache-memory", flags.kv_cache_memory,
                                    "KV cache budget, e.g. 4GiB, 512MiB or bytes");
  command.add_option("--num-blocks", flags.num_blocks, "Exact number of KV blocks")
      ->excludes(memory);
  command.add_option("--block-size", flags.block_size, "Tokens per block before unification")
      ->capture_default_str();
  command.add_option("--max-model-len", flags.max_model_len,
                     "Longest sequence (default: the model's max_position_embeddings)");
  auto* dtype =
      command.add_option("--dtype", flags.dtype, "KV dtype: auto, float32, bfloat16, float16")
          ->capture_default_str();
  command
      .add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                  "KV dtype: auto, bfloat16, float16, float32 or fp8 (e4m3, scale 1; CPU only)")
      ->capture_default_str()
      ->excludes(dtype);
  command
      .add_option("--attention-backend", flags.attention_backend,
                  "Attention backend that runs: auto (the device's), cpu or cuda")
      ->capture_default_str();
  command
      .add_option("--kv-buffer-layout", flags.buffer_layout,
                  "separate (a buffer per slot) or interleaved (one buffer)")
      ->capture_default_str();
}

CacheConfig parse_cache_flags(const CacheFlags& flags) {
  CacheConfig config;
  if (flags.dtype != "auto") {
    config.dtype = parse_dtype(flags.dtype);
    if (!is_floating(*config.dtype)) {
      fail(
          "--dtype {} is not a floating type; expected auto, float32, bfloat16 or float16 (an FP8 "
          "cache is --kv-cache-dtype fp8)",
          flags.dtype);
    }
  }
  if (flags.kv_cache_dtype != "auto") {
    const std::string& name = flags.kv_cache_dtype;
    config.dtype = name == "fp8" || name == "fp8_e4m3" ? DType::kF8E4M3 : parse_dtype(name);
    if (!is_kv_cache_dtype(*config.dtype)) {
      fail("--kv-cache-dtype {}: expected auto, bfloat16, float16, float32 or fp8", name);
    }
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

}  // namespace pagoda
