#include "kv/kv_cache_plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"

namespace pagoda {
namespace {

int64_t choose_num_blocks(const KvCachePlan& plan, const KvCacheOptions& options) {
  if (plan.page_bytes() > kMaxPoolBytes / plan.slots_per_block) {
    fail("one block id would take {} pages of {} bytes, over the {} limit of a KV pool",
         plan.slots_per_block, plan.page_bytes(), format_bytes(kMaxPoolBytes));
  }
  const int64_t per_block = plan.bytes_per_block_id();
  const int64_t needed = plan.blocks_for_sequence(plan.max_model_len) + kNullBlocks;
  int64_t num_blocks = 0;
  const int64_t max_blocks = kMaxPoolBytes / per_block;
  if (options.num_blocks) {
    num_blocks = *options.num_blocks;
    if (num_blocks < needed) {
      fail(
          "{} KV blocks cannot hold one sequence of max_model_len {} tokens, which needs {} "
          "blocks (including the null block); raise --num-blocks or lower --max-model-len",
          num_blocks, plan.max_model_len, needed);
    }
  } else if (options.memory_bytes) {
    num_blocks = *options.memory_bytes / per_block;
    if (num_blocks < needed) {
      fail(
          "KV cache memory of {} holds {} blocks of {} per block id; one sequence of "
          "max_model_len {} tokens needs {} blocks ({}); raise --kv-cache-memory or lower "
          "--max-model-len",
          format_bytes(*options.memory_bytes), num_blocks, format_bytes(per_block),
          plan.max_model_len, needed,
          needed > max_blocks ? "over the pool limit" : format_bytes(needed * per_block));
    }
  } else {
    // No budget given: the sequences asked for at once, and one of max_model_len at least.
    int64_t wanted = kNullBlocks;
    for (const int64_t tokens : options.sequences) {
      if (tokens < 1 || tokens > plan.max_model_len) {
        fail("a sequence of {} tokens cannot be held; max_model_len is {}", tokens,
             plan.max_model_len);
      }
      wanted += plan.blocks_for_sequence(tokens);
      if (wanted > max_blocks) break;  // refused below
    }
    num_blocks = std::max(needed, wanted);
  }
  if (num_blocks > max_blocks) {
    fail("{} KV blocks of {} would take more than the {} limit of a KV pool", num_blocks,
         format_bytes(per_block), format_bytes(kMaxPoolBytes));
  }
  return num_blocks;
}

// Decode context parallelism: every spec's block id covers its block size on each rank. Error for a
// rank count outside [1, 256] or an interleave that does not divide every group's block size.
void deal_over_context_ranks(KvCachePlan& plan, const KvCacheOptions& options) {
  const int64_t ranks = options.context_parallel_size;
  const int64_t interleave = options.context_interleave;
  if (ranks < 1 || ranks > 256) {
    fail("--decode-context-parallel-size {}: it must be 1 to 256", ranks);
  }
  if (interleave < 1) fail("--dcp-kv-cache-interleave-size {}: it must be at least 1", interleave);
  plan.context_parallel_size = ranks;
  plan.context_interleave = interleave;
  if (ranks == 1) return;
  for (KvGroup& group : plan.groups) {
    if (group.spec.page.block_size % interleave != 0) {
      fail(
          "--dcp-kv-cache-interleave-size {} does not divide the block size {} of layer {}'s KV "
          "group; choose a --block-size it divides",
          interleave, group.spec.page.block_size, plan.layers[group.layers.front()].name);
    }
    group.spec.context_ranks = ranks;
  }
  for (KvLayer& layer : plan.layers) {
    if (layer.spec) layer.spec->context_ranks = ranks;
  }
}

void place_buffers(KvCachePlan& plan) {
  const int64_t page = plan.page_bytes();
  const int64_t slots = plan.slots_per_block;
  plan.placements.assign(plan.layers.size(), {});
  if (plan.layout == KvBufferLayout::kInterleaved) {
    for (const KvLayer& layer : plan.layers) {
      if (layer.owns_kv() && !layer.spec->indexes_kv_by_block_stride) {
        fail(
            "an interleaved KV buffer needs every attention backend to index KV by block stride; "
            "'{}' (layer {}) does not",
            layer.backend->name(), layer.name);
      }
    }
    plan.buffers.assign(1, {.size_bytes = plan.num_blocks * slots * page});
  } else {
    plan.buffers.assign(slots, {.size_bytes = plan.num_blocks * page});
  }
  for (int64_t g = 0; g < static_cast<int64_t>(plan.groups.size()); ++g) {
    const std::vector<int64_t>& members = plan.groups[g].layers;
    for (int64_t slot = 0; slot < static_cast<int64_t>(members.size()); ++slot) {
      KvLayerPlacement& placement = plan.placements[members[slot]];
      placement.group = g;
      placement.slot = slot;
      if (plan.layout == KvBufferLayout::kInterleaved) {
        placement.buffer = 0;
        placement.pages = {.offset_bytes = slot * page, .block_stride_bytes = slots * page};
      } else {
        placement.buffer = slot;
        placement.pages = {.offset_bytes = 0, .block_stride_bytes = page};
      }
      plan.buffers[placement.buffer].layers.push_back(members[slot]);
    }
  }
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    if (!plan.layers[i].owns_kv()) plan.placements[i] = plan.placements[plan.layers[i].source];
  }
}

}  // namespace

KvBufferLayout parse_kv_buffer_layout(const std::string& text) {
  if (text == "separate") return KvBufferLayout::kSeparate;
  if (text == "interleaved") return KvBufferLayout::kInterleaved;
  fail("unknown KV buffer layout '{}'; expected separate or interleaved", text);
}

std::string_view kv_buffer_layout_name(KvBufferLayout layout) {
  return layout == KvBufferLayout::kSeparate ? "separate" : "interleaved";
}

int64_t KvCachePlan::blocks_for_sequence(int64_t num_tokens) const {
  int64_t blocks = 0;
  for (const KvGroup& group : groups)
    blocks += group.spec.blocks_for_tokens(num_tokens, max_tokens_per_step);
  return blocks;
}

std::optional<int64_t> KvCachePlan::max_sequence_tokens() const {
  bool any_full = false;
  for (const KvGroup& group : groups)
    any_full = any_full || group.spec.kind == AttentionKind::kFull;
  if (!any_full) return std::nullopt;
  const int64_t usable = num_blocks - kNullBlocks;
  // blocks_for_sequence is non-decreasing in the token count: binary search the largest fit.
  int64_t low = 0;
  int64_t high = 1;
  while (blocks_for_sequence(high) <= usable) {
    if (high >= kMaxSequenceTokens) return kMaxSequenceTokens;
    high *= 2;
  }
  while (high - low > 1) {
    const int64_t mid = low + (high - low) / 2;
    (blocks_for_sequence(mid) <= usable ? low : high) = mid;
  }
  return low;
}

double KvCachePlan::max_concurrency() const {
  const int64_t per_sequence = blocks_for_sequence(max_model_len);
  return per_sequence == 0 ? 0.0 : static_cast<double>(num_blocks - kNullBlocks) / per_sequence;
}

KvCachePlan plan_kv_cache(std::vector<KvLayer> layers, const KvCacheOptions& options) {
  if (options.max_model_len < 1) {
    fail("max_model_len is {}; it must be at least 1", options.max_model_len);
  }
  if (options.num_blocks && *options.num_blocks < 1) {
    fail("the number of KV blocks is {}; it must be at least 1", *options.num_blocks);
  }
  if (options.max_tokens_per_step < 1) {
    fail("the token budget per step is {}; it must be at least 1", options.max_tokens_per_step);
  }
  if (options.max_model_len > kMaxSequenceTokens) {
    fail("max_model_len is {}; it must be at most {}", options.max_model_len, kMaxSequenceTokens);
  }
  if (options.memory_bytes &&
      (*options.memory_bytes < 1 || *options.memory_bytes > kMaxPoolBytes)) {
    fail("the KV cache memory is {} bytes; it must be in [1, {}]", *options.memory_bytes,
         kMaxPoolBytes);
  }
  KvCachePlan plan;
  plan.layers = std::move(layers);
  plan.max_model_len = options.max_model_len;
  plan.max_tokens_per_step = options.max_tokens_per_step;
  plan.layout = options.layout;
  plan.unification = unify_page_sizes(plan.layers);
  plan.groups = group_kv_layers(plan.layers);
  deal_over_context_ranks(plan, options);
  plan.slots_per_block = slots_per_block(plan.groups);
  plan.num_blocks = choose_num_blocks(plan, options);
  place_buffers(plan);
  return plan;
}

KvCache allocate_kv_cache(const KvCachePlan& plan, Device device) {
  KvCache cache;
  for (const KvBuffer& buffer : plan.buffers) {
    cache.buffers.push_back(Tensor::empty({buffer.size_bytes}, DType::kU8, device));
  }
  cache.views.resize(plan.layers.size());
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const KvLayer& layer = plan.layers[i];
    if (!layer.owns_kv()) continue;
    const KvLayerPlacement& placement = plan.placements[i];
    cache.views[i] = reshape_kv_cache(cache.buffers[placement.buffer], *layer.backend,
                                      layer.spec->page, plan.num_blocks, placement.pages);
  }
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    if (!plan.layers[i].owns_kv()) cache.views[i] = cache.views[plan.layers[i].source];
  }
  return cache;
}

}  // namespace pagoda
