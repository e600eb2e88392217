// The KV cache as a run configures it, in typed values: "auto" choices resolved once for the
// device and the model, and one function that plans the cache for a run. The command line's
// strings are parsed in cli/.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "attention/backend.h"
#include "kv/kv_cache_plan.h"
#include "model/model_config.h"

namespace pagoda {

struct CacheConfig {
  // The KV dtype (is_kv_cache_dtype); nullopt (auto): bfloat16 on a GPU, else the target's dtype
  // (else bfloat16).
  std::optional<DType> dtype;
  // The drafter's layers' KV dtype when it differs (a bf16 drafter beside an FP8 target); nullopt:
  // dtype.
  std::optional<DType> draft_dtype;
  // Target layers kept out of an fp8 cache (--kv-cache-dtype-skip-layers), in skip_dtype (nullopt:
  // what auto gives, the model's own).
  KvDtypeSkips dtype_skips;
  std::optional<DType> skip_dtype;
  // The attention backend that plans the layout and runs; null (auto): the device's.
  const AttentionBackend* backend = nullptr;
  int64_t block_size = 16;               // tokens per block before page sizes are unified
  std::optional<int64_t> max_model_len;  // default: the target's max_position_embeddings
  // The scheduler's token budget per step, which bounds the blocks of sliding-window groups.
  int64_t max_num_batched_tokens = kDefaultMaxNumBatchedTokens;
  std::optional<int64_t> memory_bytes;  // the pool's budget
  std::optional<int64_t> num_blocks;    // or an exact block count
  KvBufferLayout layout = KvBufferLayout::kSeparate;
  // Decode context parallelism: ranks each sequence's tokens are dealt over, so many at a time.
  int64_t context_parallel_size = 1;
  int64_t context_interleave = 1;
};

// Whether a KV cache may be kept in `dtype`: a floating type, or e4m3 (with scale 1).
bool is_kv_cache_dtype(DType dtype);

// A KV dtype as --kv-cache-dtype spells it: auto (nullopt), bfloat16, float16, float32, or fp8
// (also fp8_e4m3). Error naming `what` for any other name.
std::optional<DType> parse_kv_cache_dtype(std::string_view name, std::string_view what);

// `config` with its automatic choices made for `target` on `device`. Throws Error when the named
// backend does not run on the device, max_model_len is longer than the target's
// max_position_embeddings, or dtype_skips are given without an fp8 cache or name a layer that
// does not exist or owns no KV.
CacheConfig resolve_cache_config(CacheConfig config, const ModelConfig& target, Device device);

// Plans the KV cache of a resolved config for a run. With neither memory_bytes nor num_blocks the
// pool holds the `sequences` (token counts) at once, and at least one max_model_len sequence.
// Throws Error for what planning refuses (kv_cache_plan.h).
KvCachePlan plan_cache(const ModelConfig& target, const ModelConfig* drafter,
                       const CacheConfig& config, std::span<const int64_t> sequences = {});

// A KV budget on a GPU that holds a loaded model: `utilization` of its memory, less what is in use,
// less a reserve for activations. Throws Error when nothing is left.
int64_t gpu_kv_cache_budget(Device device, double utilization);

}  // namespace pagoda
