// CUDA paged attention (DESIGN.md §4): KV writes through the slot mapping, then one tensor-core
// kernel for decode and prefill rows. Pages are addressed through runtime block, token and head
// strides, so NHD, HND and padded pages all work. Requires bf16 queries, a bf16 or e4m3 cache
// (e4m3 pages are widened to f16 in shared memory and multiplied in f16; the K/V write divides by
// the layer's k_scale / v_scale and rounds to e4m3), and a layer within kHeadSizes and
// kMaxQueriesPerKvHead whose cache rows are whole 16-byte pieces.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "attention/attention_plan.h"
#include "core/tensor.h"

namespace pagoda::cuda {

class DeviceMetadata;
enum class PrefillCtas;

// The (K, V) head sizes the kernels are instantiated for: the one list that the backend declares,
// paged_attention() checks and the kernel dispatch covers (tests/attention checks each).
inline constexpr std::array<std::pair<int64_t, int64_t>, 8> kHeadSizes = {
    {{16, 16}, {24, 16}, {32, 32}, {64, 64}, {128, 128}, {192, 128}, {256, 256}, {512, 512}}};
// The kernels copy K/V rows in 16-byte pieces: each row's bytes are a multiple of this (what the
// backend declares as AttentionSupport::row_bytes_multiple).
inline constexpr int64_t kRowBytesMultiple = 16;
// Query heads per KV head the kernels take.
inline constexpr int64_t kMaxQueriesPerKvHead = 64;

// KV splits the decode kernel uses for `pairs` CTAs (sequence, KV head, row tile) over at most
// `max_seq_len` of the rank's tokens.
int64_t decode_splits_for(int64_t head_size_k, int64_t head_size_v, int64_t pairs,
                          int64_t max_seq_len);

// Whether prefill CTAs of shape `ctas` exist for these head sizes and cache type on this device
// (kDefault and k4Warps16Rows: for every head); a plan asking for others is refused.
bool prefill_ctas_available(PrefillCtas ctas, int64_t head_size_k, int64_t head_size_v,
                            DType cache_dtype);
// A short name: auto, 4x16, 8x16, 4x32, wgmma (two warpgroups), wgmma+p (and a producer).
std::string_view prefill_ctas_name(PrefillCtas ctas);
// The prefill CTAs a plan of PrefillCtas::kDefault runs for `seqs` prompts of at most `max_rows`
// query rows (tokens x query heads per KV head) each, over `kv_heads` KV heads, the longest
// prompt attending over `max_keys` tokens (its cached ones too): the measured best for the head,
// and for heads of 128 with bf16 pages on sm_90a the warpgroup kernel unless the launch is many
// waves of short prompts, with a producer warpgroup from 2k keys.
PrefillCtas prefill_ctas_for(int64_t head_size_k, int64_t head_size_v, DType cache_dtype,
                             int64_t seqs, int64_t kv_heads, int64_t max_rows, int64_t max_keys);

// query: [T, Hq, Dk] bf16 (unit inner stride, rows may be strided); key [T, Hkv, Dk] and value
// [T, Hkv, Dv] bf16, or both undefined (attend over the cache as it is). output: [T, Hq * Dv]
// bf16, contiguous. params.sinks, when set, points at [Hq] f32 in device memory. Only the plan's
// real rows are read or written. Queued on cuda::stream().
void paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                     const Tensor& value, const KvCacheView& cache, DeviceMetadata& plan,
                     const Tensor& output);

}  // namespace pagoda::cuda
