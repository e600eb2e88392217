// The whole KV cache plan: layers, page-size decisions, groups, which buffer each layer's pages
// live in (offset and block stride), and how many blocks a memory budget buys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attention/backend.h"
#include "kv/block_pool.h"
#include "kv/kv_groups.h"
#include "kv/kv_layers.h"
#include "kv/page_size_unification.h"

namespace pagoda {

// How the tensors that share a block id are laid out in memory.
enum class KvBufferLayout {
  kSeparate,     // one buffer per slot: [num_blocks][page]
  kInterleaved,  // one buffer: [num_blocks][slot][page]; needs block-stride indexing everywhere
};

// "separate" or "interleaved"; throws Error naming other values.
KvBufferLayout parse_kv_buffer_layout(const std::string& text);
std::string_view kv_buffer_layout_name(KvBufferLayout layout);

// The scheduler's default token budget per step: a step computes at most this many tokens of one
// sequence, which bounds the blocks a sliding-window group holds.
constexpr int64_t kDefaultMaxNumBatchedTokens = 8192;

struct KvCacheOptions {
  std::optional<int64_t> memory_bytes;  // budget for the pool
  std::optional<int64_t> num_blocks;    // or an exact block count (wins over memory_bytes)
  int64_t max_model_len = 0;            // the pool must hold one sequence this long
  // The most tokens of one sequence a step computes (the scheduler's max_num_batched_tokens).
  int64_t max_tokens_per_step = kDefaultMaxNumBatchedTokens;
  // With neither memory_bytes nor num_blocks, the pool holds these sequences (token counts) at
  // once, and at least one max_model_len sequence.
  std::vector<int64_t> sequences;
  KvBufferLayout layout = KvBufferLayout::kSeparate;
  // Decode context parallelism: a sequence's tokens are dealt over this many ranks,
  // `context_interleave` at a time (which must divide every group's block size). Each rank's pages
  // hold its share, so one block id covers block_size × context_parallel_size tokens.
  int64_t context_parallel_size = 1;
  int64_t context_interleave = 1;
};

struct KvBuffer {
  int64_t size_bytes = 0;
  std::vector<int64_t> layers;  // owning layers whose pages live here
};

struct KvLayerPlacement {
  int64_t group = -1;
  int64_t slot = -1;  // position in the group = which tensor of the block id
  int64_t buffer = -1;
  PagePlacement pages;  // where block b's page starts in that buffer
};

struct KvCachePlan {
  std::vector<KvLayer> layers;
  PageUnification unification;
  std::vector<KvGroup> groups;
  int64_t slots_per_block = 0;  // tensors that share one block id
  int64_t num_blocks = 0;       // including the reserved null block (id 0)
  int64_t max_model_len = 0;
  int64_t max_tokens_per_step = 0;    // as in KvCacheOptions
  int64_t context_parallel_size = 1;  // as in KvCacheOptions
  int64_t context_interleave = 1;
  KvBufferLayout layout = KvBufferLayout::kSeparate;
  std::vector<KvBuffer> buffers;
  std::vector<KvLayerPlacement> placements;  // per layer; a sharing layer has its source's

  int64_t page_bytes() const { return unification.page_bytes; }
  int64_t bytes_per_block_id() const { return page_bytes() * slots_per_block; }
  int64_t total_bytes() const { return bytes_per_block_id() * num_blocks; }
  // The most blocks one sequence of `num_tokens` tokens holds at once, summed over groups: the
  // one rule the planner, admission, `inspect` and pool sizing all use.
  int64_t blocks_for_sequence(int64_t num_tokens) const;
  // The longest sequence the pool can hold alone (at most kMaxSequenceTokens); nullopt when only
  // sliding groups exist (no length runs the pool out).
  std::optional<int64_t> max_sequence_tokens() const;
  // How many sequences of max_model_len tokens fit at once.
  double max_concurrency() const;
};

constexpr int64_t kMaxPoolBytes = int64_t{1} << 50;       // larger pools are refused
constexpr int64_t kMaxSequenceTokens = int64_t{1} << 48;  // max_sequence_tokens() stops here

// Builds the plan. Throws Error when the budget is too small for one max_model_len
// sequence, or when the layout needs block-stride indexing a backend lacks.
KvCachePlan plan_kv_cache(std::vector<KvLayer> layers, const KvCacheOptions& options);

// The KV cache memory of a plan and each layer's view of it (a sharing layer gets its source's).
struct KvCache {
  std::vector<Tensor> buffers;     // [size_bytes] uint8 each
  std::vector<KvCacheView> views;  // per layer
};

// Allocates the plan's buffers on `device` and reshapes every layer's view.
KvCache allocate_kv_cache(const KvCachePlan& plan, Device device);

}  // namespace pagoda
