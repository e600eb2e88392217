#include "cli/cache_flags.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/units.h"

namespace pagoda {

void add_cache_flags(CLI::App& command, CacheOptions& flags) {
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
                  "KV dtype: auto, bfloat16, float16, float32 or fp8 (e4m3, with the checkpoint's "
                  "k_scale/v_scale or 1)")
      ->capture_default_str()
      ->excludes(dtype);
  command
      .add_option("--kv-cache-dtype-skip-layers", flags.kv_cache_dtype_skip_layers,
                  "Layers kept in the model's dtype beside an fp8 KV cache: sliding_window (every "
                  "sliding-window layer) and layer indices, comma-separated")
      ->delimiter(',')
      ->allow_extra_args(false);  // the next word is a prompt, not another item
  command
      .add_option("--attention-backend", flags.attention_backend,
                  "Attention backend that runs: auto (the device's), cpu or cuda")
      ->capture_default_str();
  command
      .add_option("--kv-buffer-layout", flags.buffer_layout,
                  "separate (a buffer per slot) or interleaved (one buffer)")
      ->capture_default_str();
}

}  // namespace pagoda
