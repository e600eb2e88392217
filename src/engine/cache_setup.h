// From user-facing cache settings to a KV cache plan: dtype, backend, budget, max_model_len.
#pragma once

#include <optional>
#include <string>

#include "attention/backend.h"
#include "kv/kv_cache_plan.h"
#include "model/model_config.h"

namespace pagoda {

struct CacheFlags {
  std::string kv_cache_memory;  // e.g. "4GiB"; empty: not given
  std::optional<int64_t> num_blocks;
  int64_t block_size = 16;
  std::optional<int64_t> max_model_len;  // default: the target's max_position_embeddings
  int64_t max_num_batched_tokens = kDefaultMaxNumBatchedTokens;  // the scheduler's budget
  std::string dtype = "auto";              // auto: the target's dtype, else bfloat16
  std::string attention_backend = "auto";  // auto: cpu, or cuda on a GPU
  std::string buffer_layout = "separate";
};

struct CacheSetup {
  DType dtype = DType::kBF16;
  const AttentionBackend* backend = nullptr;
  KvCachePlan plan;
};

// Throws Error for bad flags (unknown dtype or backend, a size that does not parse, max_model_len
// over max_position_embeddings) and whatever planning refuses.
CacheSetup plan_cache(const ModelConfig& target, const ModelConfig* drafter,
                      const CacheFlags& flags);

}  // namespace pagoda
