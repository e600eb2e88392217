#include "model/tensor_parallel.h"

#include "core/error.h"
#include "model/config_reader.h"

namespace pagoda {

HeadShard shard_heads(const LayerAttentionConfig& layer, const TensorParallel& tp) {
  HeadShard out;
  out.q_count = layer.num_q_heads / tp.size;
  out.q_begin = tp.rank * out.q_count;
  // A DCP group's ranks hold the same KV heads: they split over the groups.
  const int64_t groups = std::max<int64_t>(tp.size / tp.dcp.size, 1);
  const int64_t group = tp.rank * groups / tp.size;
  if (layer.num_kv_heads >= groups) {
    out.kv_count = layer.num_kv_heads / groups;
    out.kv_begin = group * out.kv_count;
  } else {
    // Fewer KV heads than groups: the one head this group's q heads read.
    out.kv_count = 1;
    out.kv_begin = group * layer.num_kv_heads / groups;
  }
  const bool gathers = tp.size > 1 && tp.dcp.size > 1;
  out.attended_count = gathers ? out.q_count * tp.dcp.size : out.q_count;
  out.attended_begin = gathers ? group * out.attended_count : out.q_begin;
  return out;
}

void check_tensor_parallel(const ModelConfig& config, int64_t size) {
  if (size < 1 || size > 256) fail("--tensor-parallel-size {}: it must be 1 to 256", size);
  if (size == 1) return;
  const ConfigReader text(config.text_config, config.source);
  // Experts split whole: Gemma 4 counts them in num_experts (with enable_moe_block), MiMo in
  // n_routed_experts.
  const char* experts_key = text.boolean_or("enable_moe_block", false) ? "num_experts"
                            : text.has("n_routed_experts")             ? "n_routed_experts"
                                                                       : nullptr;
  if (experts_key && text.positive(experts_key) % size != 0) {
    fail("{}: {} {} does not split over {} ranks", config.source, experts_key,
         text.positive(experts_key), size);
  }
  for (const LayerAttentionConfig& layer : config.layers) {
    if (layer.num_q_heads % size != 0) {
      fail("{}: {} has {} attention heads, which do not split over {} ranks", config.source,
           layer.name, layer.num_q_heads, size);
    }
    if (layer.num_kv_heads % size != 0 && size % layer.num_kv_heads != 0) {
      fail("{}: {} has {} KV heads, which neither split over {} ranks nor divide them",
           config.source, layer.name, layer.num_kv_heads, size);
    }
  }
  const int64_t inner = text.positive("intermediate_size");
  if (inner % size != 0) {
    fail("{}: intermediate_size {} does not split over {} ranks", config.source, inner, size);
  }
}

void check_context_parallel(int64_t tp_size, int64_t dcp_size, int64_t interleave) {
  if (dcp_size < 1 || dcp_size > 256) {
    fail("--decode-context-parallel-size {}: it must be 1 to 256", dcp_size);
  }
  if (interleave < 1) fail("--dcp-kv-cache-interleave-size {}: it must be at least 1", interleave);
  if (dcp_size > 1 && tp_size > 1 && tp_size % dcp_size != 0) {
    fail(
        "--decode-context-parallel-size {} with --tensor-parallel-size {}: the DCP size must "
        "divide the TP size (or TP be 1)",
        dcp_size, tp_size);
  }
}

int64_t world_size(int64_t tp_size, int64_t dcp_size) {
  return std::max(tp_size, dcp_size);
}

bool has_context_groups(int64_t tp_size, int64_t dcp_size) {
  return dcp_size > 1 && dcp_size < world_size(tp_size, dcp_size);
}

TensorParallel rank_place(int64_t tp_size, int64_t dcp_size, int64_t rank, Communicator* comm,
                          Communicator* context_comm) {
  PAGODA_CHECK(rank >= 0 && rank < world_size(tp_size, dcp_size), "rank {} of TP {} and DCP {}",
               rank, tp_size, dcp_size);
  PAGODA_CHECK(!has_context_groups(tp_size, dcp_size) || context_comm != nullptr,
               "rank {} of TP {} and DCP {} without its DCP group's communicator", rank, tp_size,
               dcp_size);
  TensorParallel place{.rank = tp_size > 1 ? rank : 0, .size = tp_size};
  if (tp_size > 1) place.comm = comm;
  if (dcp_size > 1) {
    place.dcp = {.rank = rank % dcp_size,
                 .size = dcp_size,
                 .comm = has_context_groups(tp_size, dcp_size) ? context_comm : comm};
  }
  return place;
}

ModelConfig rank_model_config(const ModelConfig& config, int64_t tp_size, int64_t dcp_size) {
  ModelConfig out = config;
  const TensorParallel tp{.size = tp_size, .dcp = {.size = dcp_size}};
  for (LayerAttentionConfig& layer : out.layers) {
    const HeadShard shard = shard_heads(layer, tp);
    layer.num_q_heads = shard.attended_count;
    layer.num_kv_heads = shard.kv_count;
  }
  return out;
}

}  // namespace pagoda
