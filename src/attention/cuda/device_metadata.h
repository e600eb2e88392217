// The device copy of one KV cache group's attention metadata for a step, with the split-KV scratch
// of its decode kernel: uploaded once and read by every layer of the group. Buffers keep their
// addresses across steps, so a CUDA graph captured over one step replays correctly after the next
// update(). The CUDA backend's plans (cuda_backend.h) own one each and size it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "attention/metadata.h"
#include "core/tensor.h"

namespace pagoda::cuda {

// The shape of prefill CTAs, which tests and benchmarks compare. kDefault takes the measured best
// for the head size and the step; the others exist for heads of 128 and 256 (k4Warps32Rows and
// k2Warpgroups and k3Warpgroups: 128 only, the latter two for bf16 pages on sm_90a), and other
// heads keep k4Warps16Rows.
enum class PrefillCtas {
  kDefault,
  k4Warps16Rows,  // 64 rows a CTA
  k8Warps16Rows,  // 128 rows
  k4Warps32Rows,  // 128 rows, each warp's K/V fragments serving two row tiles
  k2Warpgroups,   // 128 rows on wgmma (prefill_wgmma.cuh)
  k3Warpgroups,   // the same, chunks of 128 keys, a third warpgroup copying for the two
};
// Every shape but kDefault, k4Warps16Rows (every head's fallback) first.
inline constexpr std::array<PrefillCtas, 5> kPrefillCtasShapes = {
    PrefillCtas::k4Warps16Rows, PrefillCtas::k8Warps16Rows, PrefillCtas::k4Warps32Rows,
    PrefillCtas::k2Warpgroups, PrefillCtas::k3Warpgroups};

class DeviceMetadata {
 public:
  // Sized for at most `max_seqs` sequences, `max_tokens` query rows and `max_blocks_per_seq`
  // blocks per sequence.
  DeviceMetadata(int64_t max_seqs, int64_t max_tokens, int64_t max_blocks_per_seq,
                 int64_t block_size);
  ~DeviceMetadata();
  DeviceMetadata(const DeviceMetadata&) = delete;
  DeviceMetadata& operator=(const DeviceMetadata&) = delete;

  // Copies the step's metadata to the device (asynchronously on cuda::stream()). A decode-only
  // step whose sequences all have L query rows may add `padding_seqs` sequences of L tokens over
  // the null block, written nowhere, to reach a captured batch size. Throws Error when the step
  // exceeds the sizes given at construction.
  void update(const AttentionMetadata& metadata, int64_t padding_seqs = 0);

  // Device arrays of the current step.
  const int32_t* query_start() const;   // [num_seqs + 1]
  const int32_t* seq_lens() const;      // [num_seqs]
  const int32_t* block_table() const;   // [num_seqs, block_table_stride()]
  const int64_t* slot_mapping() const;  // [num_actual_tokens]
  int64_t block_table_stride() const { return max_blocks_per_seq_; }
  int64_t block_size() const { return block_size_; }

  // Host copies of the step's sizes.
  int64_t num_seqs() const { return num_seqs_; }
  int64_t num_decode_seqs() const { return num_decode_seqs_; }
  int64_t max_decode_query_len() const { return max_decode_query_len_; }
  int64_t num_actual_tokens() const { return num_actual_tokens_; }
  int64_t max_prefill_query_len() const { return max_prefill_query_len_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  // The longest prefilling sequence, its cached tokens and new ones (0 without one).
  int64_t max_prefill_seq_len() const { return max_prefill_seq_len_; }
  // The rank's share of each sequence's tokens the cache holds (every token without DCP).
  const ContextShard& context() const { return context_; }

  // KV splits per decoding (sequence, KV head, row tile): fixed_decode_splits when set, else
  // chosen for the step's CTAs and its longest sequence, or for a CUDA graph (whose grid is
  // captured) the longest it may replay: graph_max_seq_len, when set.
  int64_t fixed_decode_splits = 0;
  int64_t graph_max_seq_len = 0;
  // The shape of prefill CTAs (see PrefillCtas).
  PrefillCtas prefill_ctas = PrefillCtas::kDefault;

  // Scratch for split-KV partial results: at least `floats` f32 and `counters` zeroed int32
  // counters. Grows (outside graph capture only) and keeps its contents' zero invariant.
  float* partials(int64_t floats);
  int32_t* counters(int64_t count);
  // Counts reallocations of any plan's scratch: a graph captured before one must be captured
  // again.
  static int64_t scratch_generation();

 private:
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;
  int64_t max_seqs_, max_tokens_, max_blocks_per_seq_, block_size_;
  int64_t num_seqs_ = 0, num_decode_seqs_ = 0, num_actual_tokens_ = 0, max_decode_query_len_ = 0;
  int64_t max_prefill_query_len_ = 0, max_prefill_seq_len_ = 0, max_seq_len_ = 0;
  ContextShard context_;
};

}  // namespace pagoda::cuda
