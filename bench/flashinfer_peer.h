// FlashInfer's paged attention over pagoda's pages, for timing beside pagoda's kernels in one
// process (bench/attention_bench.cc; built when PAGODA_FLASHINFER_DIR is set). No FlashInfer type
// appears here: only bench/flashinfer_peer.cu includes its headers.
//
// Each run is planned once when it is made (on the host, with its workspace allocated there), and
// run() only queues kernels on cuda::stream(), so it may be captured into a CUDA graph. Both kinds
// drive FlashInfer's FA2 paged prefill kernel (BatchPrefillWithPagedKVCache): decode() the way its
// Python BatchDecodeWithPagedKVCacheWrapper does with use_tensor_cores=True (one query row per
// sequence, no mask), prefill() causal over whole prompts.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace pagoda::bench {

// One batch over pagoda's NHD pages with equal K/V head sizes: block b's page is
// [2][block_size][num_kv_heads][head_size] bf16 at pool + b * page_elements, K then V.
// Non-owning: the pool, table and tensors must outlive the objects built from it.
struct FlashInferBatch {
  const void* pool = nullptr;  // bf16 pages on the device
  int64_t page_elements = 0;   // bf16 elements between block b's page and b + 1's
  int64_t block_size = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_size = 0;
  float scale = 1.0f;                    // applied to q·k
  const int32_t* block_table = nullptr;  // [num_seqs, block_table_stride] int32 on the device
  int64_t block_table_stride = 0;        // row s holds sequence s's block ids
  std::vector<int64_t> seq_lens;         // [num_seqs]: tokens in the cache
  Tensor query;                          // [T, num_q_heads, head_size] bf16
  Tensor output;                         // [T, num_q_heads * head_size] bf16, contiguous
};

class FlashInferPlan;  // FlashInfer's plan, parameters and buffers (flashinfer_peer.cu)

// One planned FlashInfer run over a batch. Throws Error for a shape this build has no kernel for;
// FlashInfer's own errors from planning pass through.
class FlashInferAttention {
 public:
  // One query row per sequence (T = num_seqs) over its whole cache. Head size 128 only.
  static std::unique_ptr<FlashInferAttention> decode(const FlashInferBatch& batch);
  // Causal prompts: sequence s has the last min(query_len, seq_lens[s]) of its tokens as query
  // rows (all of them by default), rows in sequence order. Head sizes 128, 256 and 512.
  static std::unique_ptr<FlashInferAttention> prefill(const FlashInferBatch& batch,
                                                      int64_t query_len = INT64_MAX);
  ~FlashInferAttention();
  FlashInferAttention(const FlashInferAttention&) = delete;
  FlashInferAttention& operator=(const FlashInferAttention&) = delete;

  void run();  // queued on cuda::stream()

 private:
  explicit FlashInferAttention(std::unique_ptr<FlashInferPlan> plan);
  std::unique_ptr<FlashInferPlan> plan_;
};

}  // namespace pagoda::bench
