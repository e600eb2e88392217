// Tensor parallelism as the model's layers see it: a rank's place in its group, which heads and
// rows of each weight it holds, and the all-reduce that sums the partial outputs of row-parallel
// projections. Attention splits q heads evenly; KV heads split with them, or, when there are fewer
// KV heads than ranks, each rank holds the one KV head its q heads read (replicated on size / kv
// ranks). A gated MLP splits its inner dimension (gate and up by rows, down by columns). MoE
// experts split whole: each rank runs the routed tokens through its own experts, and the ranks'
// sums are all-reduced. Routers, embeddings, norms and the lm_head are replicated.
//
// Decode context parallelism (DCP) deals each sequence's tokens over `dcp.size` ranks, which store
// only their share of its K/V. Each attention layer then attends its share with every query head
// its DCP group computes (the ranks' q heads gathered, under TP), and the shares' outputs merge by
// their log-sum-exps. The ranks of a DCP group hold the same KV heads: KV heads split over
// tp.size / dcp.size groups instead of tp.size ranks: DCP alone (weights whole on each rank), with
// as many TP ranks, or in groups of dcp.size consecutive TP ranks.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace pagoda {

// A rank's place among the decode-context-parallel ranks of its group.
struct ContextParallel {
  int64_t rank = 0;
  int64_t size = 1;
  Communicator* comm = nullptr;  // with size > 1: the DCP group's
};

struct TensorParallel {
  int64_t rank = 0;
  int64_t size = 1;
  Communicator* comm = nullptr;  // with size > 1
  ContextParallel dcp;

  // This rank's even share of `count` items: the first of them, and how many.
  int64_t first_of(int64_t count) const { return rank * (count / size); }
  int64_t share_of(int64_t count) const { return count / size; }
  // This rank's even share of `count` items along `dim` of a weight (the whole weight at size 1).
  WeightSlice share(int64_t dim, int64_t count) const {
    return size == 1 ? WeightSlice{} : WeightSlice{dim, first_of(count), share_of(count)};
  }
  // Sums x over the ranks, in place (nothing at size 1).
  void all_reduce(const Tensor& x) const {
    if (size > 1) comm->all_reduce(x);
  }
};

// The q and KV heads of one attention layer that a rank holds, and the q heads its attention
// runs: its own, or under DCP with TP its DCP group's (each rank's own heads in rank order).
struct HeadShard {
  int64_t q_begin = 0;
  int64_t q_count = 0;
  int64_t kv_begin = 0;
  int64_t kv_count = 0;
  int64_t attended_begin = 0;
  int64_t attended_count = 0;
};
HeadShard shard_heads(const LayerAttentionConfig& layer, const TensorParallel& tp);

// Error, naming the field and the numbers, unless `config` splits over `size` ranks: its
// architecture runs tensor-parallel, every layer's q heads divide evenly, its KV heads divide
// evenly or divide `size`, and so do the MLP's inner size and the MoE experts.
void check_tensor_parallel(const ModelConfig& config, int64_t size);
// Error, naming the flag and the numbers, unless `dcp_size` context-parallel ranks combine with
// `tp_size` tensor-parallel ones: 1 to 256 of them, with TP 1 or a TP size they divide.
// `interleave` must be positive (that it divides the block size is the KV plan's check).
void check_context_parallel(int64_t tp_size, int64_t dcp_size, int64_t interleave);
// The ranks a run holds: the larger of the two sizes.
int64_t world_size(int64_t tp_size, int64_t dcp_size);
// Whether the DCP groups are smaller than the group of all ranks (DCP dividing a larger TP size):
// ranks [g·dcp, (g+1)·dcp) then form DCP group g, with a communicator of their own.
bool has_context_groups(int64_t tp_size, int64_t dcp_size);
// Rank `rank`'s place among world_size(tp_size, dcp_size) ranks: `comm` is its communicator in the
// group of all ranks (null for one rank), `context_comm` in its DCP group when
// has_context_groups().
TensorParallel rank_place(int64_t tp_size, int64_t dcp_size, int64_t rank, Communicator* comm,
                          Communicator* context_comm = nullptr);

// `config` with every layer's heads as one rank of `tp_size` TP and `dcp_size` DCP ranks runs its
// attention (its KV heads, and the q heads it attends with: its DCP group's under both): what that
// rank's KV cache plan is made from.
ModelConfig rank_model_config(const ModelConfig& config, int64_t tp_size, int64_t dcp_size = 1);

}  // namespace pagoda
