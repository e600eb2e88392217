// Tensor parallelism as the model's layers see it: a rank's place in its group, which heads and
// rows of each weight it holds, and the all-reduce that sums the partial outputs of row-parallel
// projections. Attention splits q heads evenly; KV heads split with them, or, when there are fewer
// KV heads than ranks, each rank holds the one KV head its q heads read (replicated on size / kv
// ranks). A gated MLP splits its inner dimension (gate and up by rows, down by columns).
// Embeddings, norms and the lm_head are replicated.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace pagoda {

struct TensorParallel {
  int64_t rank = 0;
  int64_t size = 1;
  Communicator* comm = nullptr;  // with size > 1

  // This rank's even share of `count` items along `dim` of a weight (the whole weight at size 1).
  WeightSlice share(int64_t dim, int64_t count) const {
    return size == 1 ? WeightSlice{} : WeightSlice{dim, rank * (count / size), count / size};
  }
  // Sums x over the ranks, in place (nothing at size 1).
  void all_reduce(const Tensor& x) const {
    if (size > 1) comm->all_reduce(x);
  }
};

// The q and KV heads of one attention layer that a rank holds.
struct HeadShard {
  int64_t q_begin = 0;
  int64_t q_count = 0;
  int64_t kv_begin = 0;
  int64_t kv_count = 0;
};
HeadShard shard_heads(const LayerAttentionConfig& layer, const TensorParallel& tp);

// Error, naming the field and the numbers, unless `config` splits over `size` ranks: its
// architecture runs tensor-parallel (MoE blocks do not yet), every layer's q heads divide evenly,
// its KV heads divide evenly or divide `size`, and so does the MLP's inner size.
void check_tensor_parallel(const ModelConfig& config, int64_t size);

// `config` with every layer's heads as one rank of `size` holds them: what that rank's KV cache
// plan is made from.
ModelConfig rank_model_config(const ModelConfig& config, int64_t size);

}  // namespace pagoda
