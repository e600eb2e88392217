#include "model/tensor_parallel.h"

#include "core/error.h"
#include "model/architectures.h"
#include "model/config_reader.h"

namespace pagoda {

HeadShard shard_heads(const LayerAttentionConfig& layer, const TensorParallel& tp) {
  HeadShard out;
  out.q_count = layer.num_q_heads / tp.size;
  out.q_begin = tp.rank * out.q_count;
  if (layer.num_kv_heads >= tp.size) {
    out.kv_count = layer.num_kv_heads / tp.size;
    out.kv_begin = tp.rank * out.kv_count;
  } else {
    // Fewer KV heads than ranks: the one head this rank's q heads read.
    out.kv_count = 1;
    out.kv_begin = tp.rank * layer.num_kv_heads / tp.size;
  }
  return out;
}

void check_tensor_parallel(const ModelConfig& config, int64_t size) {
  if (size < 1 || size > 256) fail("--tensor-parallel-size {}: it must be 1 to 256", size);
  if (size == 1) return;
  const Architecture& arch = find_architecture(config.architecture);
  if (!arch.tensor_parallel) {
    fail(
        "{}: {} does not run tensor-parallel yet (--tensor-parallel-size {}); these do: Llama, "
        "Qwen3, Gemma 4 without MoE",
        config.source, config.architecture, size);
  }
  const ConfigReader text(config.text_config, config.source);
  if (text.boolean_or("enable_moe_block", false)) {
    fail("{}: MoE experts do not split over ranks yet (--tensor-parallel-size {})", config.source,
         size);
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

ModelConfig rank_model_config(const ModelConfig& config, int64_t size) {
  ModelConfig out = config;
  const TensorParallel tp{.size = size};
  for (LayerAttentionConfig& layer : out.layers) {
    const HeadShard shard = shard_heads(layer, tp);
    layer.num_q_heads = shard.q_count;
    layer.num_kv_heads = shard.kv_count;
  }
  return out;
}

}  // namespace pagoda
