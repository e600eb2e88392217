// Command-line flags for the KV cache, shared by the commands that plan one, and their typed form.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "engine/cache_config.h"

namespace pagoda {

struct CacheFlags {
  std::string kv_cache_memory;  // e.g. "4GiB"; empty: not given
  std::optional<int64_t> num_blocks;
  int64_t block_size = 16;
  std::optional<int64_t> max_model_len;
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";  // vLLM's spelling of the same choice, with fp8
  std::string attention_backend = "auto";
  std::string buffer_layout = "separate";
};

void add_cache_flags(CLI::App& command, CacheFlags& flags);

// The flags as a CacheConfig, "auto" left unresolved. Throws Error for a value that does not parse
// (unknown dtype, backend or layout, a size that is not one).
CacheConfig parse_cache_flags(const CacheFlags& flags);

}  // namespace pagoda
