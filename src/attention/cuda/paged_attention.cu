// Paged attention on tensor cores (mma.sync m16n8k16 and m16n8k8, bf16 in, f32 accumulate).
//
// A CTA serves one (sequence, KV head, row tile, KV split). Its query rows are the
// (token, head-in-group) pairs of that KV head's query group, token-major, so a decode token of a
// 32q/8kv model fills 4 of the 16 rows of an mma tile and the KV head's pages are read once for
// all 4 query heads. Keys stream through shared memory in chunks of 64, double-buffered with
// cp.async (16-byte copies; keys past the range are zero-filled). Each key's address comes from
// the block table and the cache's runtime block / token / head strides.
//
// Decode (kRowTiles = 1): 8 warps share one row tile and take 8 keys of each chunk apiece, so a
// CTA's chain of dependent instructions per chunk is short; their online-softmax states are merged
// through shared memory at the end. Long contexts split across CTAs; each writes a partial (O / l,
// log2-sum-exp) and the last CTA of a (sequence, KV head) to finish merges them, found through a
// counter it resets for the next launch. Prefill (kRowTiles = 4): each of 4 warps owns 16 of 64
// rows and reads every key of each chunk.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "attention/cuda/attention_plan.h"
#include "attention/cuda/paged_attention.h"
#include "attention/cuda/paged_tiles.cuh"
#include "core/cuda/context.h"
#include "core/cuda/launch.h"

namespace pagoda::cuda {
namespace {

using namespace attention;

constexpr int kDefaultChunk = 64;  // keys per shared-memory stage (32 for 512-wide heads' prefill)
// A split count chosen for a step leaves each part at least this many chunks. A graph's count is
// chosen for the longest sequence the model allows; a shorter sequence uses at most one part per
// chunk (see the kernel), which measured faster than fewer, longer parts at batch 1.
constexpr int kMinChunksPerSplit = 4;
constexpr int kMaxDecodeSplits = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -INFINITY;

template <int kDk, int kDv, int kRowTiles, int kStages, int kChunkKeys>
__global__ void __launch_bounds__(Shape<kDk, kDv, kRowTiles, kStages, kChunkKeys>::kThreads)
    attention_kernel(const Args a) {
  using S = Shape<kDk, kDv, kRowTiles, kStages, kChunkKeys>;
  constexpr int kThreads = S::kThreads;
  constexpr int kChunk = S::kChunk;
  extern __shared__ uint4 shared_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(shared_raw);  // [kRows][kKStride]
  bf16* stages = q_s + S::kQElems;                  // 2 x ([kChunk][kKStride], [kChunk][kVStride])
  TableWindow window{reinterpret_cast<int32_t*>(stages + S::kStages * S::kStageElems)};

  const int seq = a.seq_offset + blockIdx.x;
  const int kv_head = blockIdx.y;
  // z: (row tile, split, V slice), the slice fastest. A slice is kDv of V's dv_total columns.
  const int slice = blockIdx.z % a.dv_slices;
  const int row_tile = blockIdx.z / a.dv_slices / a.num_splits;
  const int split = blockIdx.z / a.dv_slices % a.num_splits;
  const int dv_offset = slice * kDv;
  PagedTensor v_slice = a.v;
  v_slice.base += dv_offset;
  const int q_begin = a.query_start[seq];
  const int q_len = a.query_start[seq + 1] - q_begin;
  const int seq_len = a.seq_lens[seq];
  const int row_begin = row_tile * S::kRows;
  const int num_rows = q_len * a.group;
  if (row_begin >= num_rows) return;  // a prefill tile past a shorter sequence (never split)
  const int rows_here = min(S::kRows, num_rows - row_begin);
  const int first_pos = seq_len - q_len;

  // Keys this CTA reads: up to its last row's position, from the first row's window start.
  const int lowest_pos = first_pos + row_begin / a.group;
  const int highest_pos = first_pos + (row_begin + rows_here - 1) / a.group;
  const int kv_lo = a.window > 0 ? max(0, lowest_pos - a.window + 1) : 0;
  const int kv_hi = highest_pos + 1;
  // The splits this sequence uses: no more than it has chunks, so a short sequence in a launch
  // sized for long ones (a graph's) merges no empty parts. The CTAs of the other splits have
  // nothing to do.
  const int splits = max(1, min(a.num_splits, (kv_hi - kv_lo + kChunk - 1) / kChunk));
  if (split >= splits) return;
  const int per_split = ((kv_hi - kv_lo + splits - 1) / splits + kChunk - 1) / kChunk * kChunk;
  const int start = kv_lo + split * per_split;
  const int end = min(kv_hi, start + per_split);
  const int num_chunks = end > start ? (end - start + kChunk - 1) / kChunk : 0;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_rows = warp % kRowTiles;  // row tile of this warp
  const int warp_keys = warp / kRowTiles;  // key group of this warp
  const int g = lane / 4;
  const int t4 = lane % 4;

  // This thread's two rows (g and g + 8 of the warp's tile): positions; -1 masks every key.
  int row_pos[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp_rows * 16 + g + 8 * i;
    row_pos[i] = r < rows_here ? first_pos + (row_begin + r) / a.group : -1;
  }
  const float scale_log2 = a.scale * kLog2e;

  float o[kDv / 8][4] = {};
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};

  // Chunk c lives in stage c % kStages; kStages - 1 chunks are in flight ahead of the one in use.
  auto issue = [&](int chunk) {
    if (chunk < num_chunks) {
      bf16* stage = stages + (chunk % S::kStages) * S::kStageElems;
      load_chunk<kDk, kDv, kChunk, kThreads>(a, v_slice, seq, kv_head, start + chunk * kChunk, end,
                                             window, stage, stage + kChunk * S::kKStride);
    }
    copy_commit();  // an empty group keeps the count of groups per chunk fixed
  };
  // Until the kernels before this one finish, only what they cannot write is read: the step's
  // metadata, and pages of positions cached before this step's tokens (earlier kernels write K/V
  // only at this step's positions). The first chunks of those load while the kernels finish.
  if (num_chunks > 0) fill_window<kThreads>(a, seq, a.block_divisor.divide(start), window);
  int early = 0;
  while (early < S::kStages - 1 && early < num_chunks &&
         start + (early + 1) * kChunk <= first_pos) {
    issue(early++);
  }
  start_after_prior_kernels();
  if (a.new_k != nullptr && start < kv_hi && kv_hi <= start + per_split) {
    // The decoding token's K row and V slice, where this CTA and no other reads them.
    const int64_t slot = a.slot_mapping[q_begin];
    if (slot >= 0) {
      const int64_t block = slot / a.block_size;
      const int offset = static_cast<int>(slot % a.block_size);
      const int k_pieces = a.head_size_k / 8;
      for (int i = threadIdx.x; i < k_pieces + kDv / 8; i += kThreads) {
        const bool is_key = i < k_pieces;
        const int piece = is_key ? i : i - k_pieces;
        const PagedTensor& cache = is_key ? a.k : v_slice;
        const bf16* src =
            is_key ? a.new_k + q_begin * a.new_k_token_stride + kv_head * a.new_k_head_stride
                   : a.new_v + q_begin * a.new_v_token_stride + kv_head * a.new_v_head_stride +
                         dv_offset;
        bf16* dst = cache.base + block * cache.block_stride + offset * cache.token_stride +
                    kv_head * cache.head_stride;
        *reinterpret_cast<uint4*>(dst + piece * 8) =
            *reinterpret_cast<const uint4*>(src + piece * 8);
      }
    }
    __syncthreads();  // the rows are written before any copy of them is issued
  }
  for (int c = early; c < S::kStages - 1; ++c)
    issue(c);
  // Query rows of this tile; rows past the sequence are zero. The loop's first barrier publishes
  // them.
  for (int i = threadIdx.x; i < S::kRows * (kDk / 8); i += kThreads) {
    const int r = i / (kDk / 8);
    const int piece = i % (kDk / 8);
    const int row = row_begin + r;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < rows_here && piece * 8 < a.head_size_k) {
      value = *reinterpret_cast<const uint4*>(
          a.q + (q_begin + row / a.group) * a.q_token_stride +
          (kv_head * a.group + row % a.group) * a.q_head_stride + piece * 8);
    }
    *reinterpret_cast<uint4*>(q_s + r * S::kKStride + piece * 8) = value;
  }
  for (int c = 0; c < num_chunks; ++c) {
    copy_wait<S::kStages - 2>();
    // Chunk c is visible to all, and every warp is done with chunk c - 1, whose stage is refilled.
    __syncthreads();
    issue(c + S::kStages - 1);

    const bf16* k_s = stages + (c % S::kStages) * S::kStageElems;
    const bf16* v_s = k_s + kChunk * S::kKStride;
    const bf16* k_warp = k_s + warp_keys * S::kKeysPerWarp * S::kKStride;
    const bf16* v_warp = v_s + warp_keys * S::kKeysPerWarp * S::kVStride;
    constexpr int kTiles = S::kKeysPerWarp / 8;

    float s[kTiles][4] = {};
#pragma unroll
    for (int kc = 0; kc < kDk / 16; ++kc) {
      uint32_t qa[4];
      load_matrix_x4(qa,
                     q_s + (warp_rows * 16 + lane % 16) * S::kKStride + kc * 16 + (lane / 16) * 8);
      if constexpr (kTiles == 1) {
        uint32_t kb[2];
        load_matrix_x2(kb, k_warp + (lane % 8) * S::kKStride + kc * 16 + ((lane / 8) % 2) * 8);
        mma(s[0], qa, kb[0], kb[1]);
      } else {
#pragma unroll
        for (int j = 0; j < kTiles; j += 2) {
          uint32_t kb[4];
          load_matrix_x4(kb, k_warp + ((j + lane / 16) * 8 + lane % 8) * S::kKStride + kc * 16 +
                                 ((lane / 8) % 2) * 8);
          mma(s[j], qa, kb[0], kb[1]);
          mma(s[j + 1], qa, kb[2], kb[3]);
        }
      }
    }

    // Scale, softcap and mask, in the log2 domain. A chunk wholly inside every row's visible
    // range (the bulk of a long context) skips the mask.
    const int key_base = start + c * kChunk + warp_keys * S::kKeysPerWarp;
    const int chunk_first = start + c * kChunk;
    const int chunk_last = chunk_first + kChunk - 1;
    const bool whole = chunk_last < end && chunk_last <= lowest_pos &&
                       (a.window == 0 || chunk_first > highest_pos - a.window);
    float chunk_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        float x = s[j][e];
        x = a.softcap > 0.0f ? a.softcap * tanhf(x * a.scale / a.softcap) * kLog2e : x * scale_log2;
        if (!whole) {
          const int key = key_base + j * 8 + t4 * 2 + e % 2;
          const bool visible =
              key < end && key <= row_pos[i] && (a.window == 0 || key > row_pos[i] - a.window);
          x = visible ? x : kNegInf;
        }
        s[j][e] = x;
        chunk_max[i] = fmaxf(chunk_max[i], x);
      }
    }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      chunk_max[i] = fmaxf(chunk_max[i], __shfl_xor_sync(0xffffffffu, chunk_max[i], 1));
      chunk_max[i] = fmaxf(chunk_max[i], __shfl_xor_sync(0xffffffffu, chunk_max[i], 2));
      const float m_new = fmaxf(m[i], chunk_max[i]);
      const float m_use = m_new == kNegInf ? 0.0f : m_new;
      alpha[i] = fast_exp2(m[i] - m_use);
      m[i] = m_new;
      l[i] *= alpha[i];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        s[j][2 * i] = fast_exp2(s[j][2 * i] - m_use);
        s[j][2 * i + 1] = fast_exp2(s[j][2 * i + 1] - m_use);
        l[i] += s[j][2 * i] + s[j][2 * i + 1];
      }
    }
    // Once the running maxima settle, most chunks leave O as it is.
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int d = 0; d < kDv / 8; ++d) {
        o[d][0] *= alpha[0];
        o[d][1] *= alpha[0];
        o[d][2] *= alpha[1];
        o[d][3] *= alpha[1];
      }
    }

    // O += P · V, P taken from the score accumulators as the A operand.
    if constexpr (kTiles == 1) {
      // 8 keys: k8 products, four V column tiles per ldmatrix (two for 16-wide V).
      const uint32_t p0 = pack_bf16(s[0][0], s[0][1]);
      const uint32_t p1 = pack_bf16(s[0][2], s[0][3]);
      constexpr int kTilesPerLoad = kDv / 8 % 4 == 0 ? 4 : 2;
#pragma unroll
      for (int d = 0; d < kDv / 8; d += kTilesPerLoad) {
        const bf16* v_rows =
            v_warp + (lane % 8) * S::kVStride + (d + (lane / 8) % kTilesPerLoad) * 8;
        if constexpr (kTilesPerLoad == 4) {
          uint32_t vb[4];
          load_matrix_x4_trans(vb, v_rows);
#pragma unroll
          for (int t = 0; t < 4; ++t)
            mma_k8(o[d + t], p0, p1, vb[t]);
        } else {
          uint32_t vb[2];
          load_matrix_x2_trans(vb, v_rows);
          mma_k8(o[d], p0, p1, vb[0]);
          mma_k8(o[d + 1], p0, p1, vb[1]);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < S::kKeysPerWarp / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int d = 0; d < kDv / 8; d += 2) {
          uint32_t vb[4];
          load_matrix_x4_trans(vb,
                               v_warp + (kk * 16 + lane % 16) * S::kVStride + (d + lane / 16) * 8);
          mma(o[d], pa, vb[0], vb[1]);
          mma(o[d + 1], pa, vb[2], vb[3]);
        }
      }
    }
  }
  copy_wait<0>();
  __syncthreads();

  // Every warp's state to shared memory: m, l, then O, per (key group, row).
  float* merge_m = reinterpret_cast<float*>(stages);
  float* merge_l = merge_m + S::kKeyGroups * S::kRows;
  float* merge_o = merge_l + S::kKeyGroups * S::kRows;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    const int slot = warp_keys * S::kRows + warp_rows * 16 + g + 8 * i;
    if (t4 == 0) {
      merge_m[slot] = m[i];
      merge_l[slot] = l[i];
    }
#pragma unroll
    for (int d = 0; d < kDv / 8; ++d) {
      merge_o[slot * kDv + d * 8 + t4 * 2] = o[d][2 * i];
      merge_o[slot * kDv + d * 8 + t4 * 2 + 1] = o[d][2 * i + 1];
    }
  }
  __syncthreads();

  const bool split_kv = splits > 1;
  // Partial results and the counter of one (sequence, KV head, V slice).
  const int64_t cta =
      (static_cast<int64_t>(blockIdx.x) * a.num_kv_heads + kv_head) * a.dv_slices + slice;
  const int64_t partial_index = cta * a.num_splits + split;
  float* partial_o = a.partials + partial_index * 16 * kDv;
  float* partial_lse =
      a.partials +
      static_cast<int64_t>(gridDim.x) * a.num_kv_heads * a.dv_slices * a.num_splits * 16 * kDv +
      partial_index * 16;
  for (int i = threadIdx.x; i < rows_here * kDv; i += kThreads) {
    const int r = i / kDv;
    const int d = i % kDv;
    float m_all = kNegInf;
    for (int w = 0; w < S::kKeyGroups; ++w)
      m_all = fmaxf(m_all, merge_m[w * S::kRows + r]);
    const int head = kv_head * a.group + (row_begin + r) % a.group;
    const float sink = a.sinks != nullptr && !split_kv ? a.sinks[head] * kLog2e : kNegInf;
    m_all = fmaxf(m_all, sink);
    const float m_use = m_all == kNegInf ? 0.0f : m_all;
    float l_all = exp2f(sink - m_use);
    float o_all = 0.0f;
    for (int w = 0; w < S::kKeyGroups; ++w) {
      const float weight = exp2f(merge_m[w * S::kRows + r] - m_use);
      l_all += merge_l[w * S::kRows + r] * weight;
      o_all += merge_o[(w * S::kRows + r) * kDv + d] * weight;
    }
    if (!split_kv) {
      const int token = q_begin + (row_begin + r) / a.group;
      a.out[token * a.out_token_stride + head * a.dv_total + dv_offset + d] =
          __float2bfloat16(l_all > 0.0f ? o_all / l_all : 0.0f);
    } else {
      partial_o[r * kDv + d] = l_all > 0.0f ? o_all / l_all : 0.0f;
      if (d == 0) partial_lse[r] = l_all > 0.0f ? m_use + log2f(l_all) : kNegInf;
    }
  }
  if (!split_kv) return;

  // The last split of this (sequence, KV head) to finish merges every split's partial result.
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(&a.counters[cta], 1);
    is_last = done == splits - 1;
    if (is_last) a.counters[cta] = 0;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const float* cta_o = a.partials + cta * a.num_splits * 16 * kDv;
  const float* cta_lse = partial_lse - split * 16;
  // A warp per row turns the splits' log-sum-exps (and the sink) into weights in shared memory,
  // with all of the row's loads in flight at once; then each output element sums its splits'
  // partials, several loads at a time. (The stages are free by now.)
  static_assert(kMaxDecodeSplits <= 64 && S::kMergeFloats >= 16 * kMaxDecodeSplits);
  float* weights = reinterpret_cast<float*>(stages);  // [16][splits]
  for (int r = warp; r < rows_here; r += S::kWarps) {
    const float lse_lo = lane < splits ? __ldcg(cta_lse + lane * 16 + r) : kNegInf;
    const float lse_hi = lane + 32 < splits ? __ldcg(cta_lse + (lane + 32) * 16 + r) : kNegInf;
    const int head = kv_head * a.group + (row_begin + r) % a.group;
    const float sink = a.sinks != nullptr ? a.sinks[head] * kLog2e : kNegInf;
    float m_all = fmaxf(fmaxf(lse_lo, lse_hi), sink);
    for (int offset = 16; offset > 0; offset /= 2)
      m_all = fmaxf(m_all, __shfl_xor_sync(0xffffffffu, m_all, offset));
    const float m_use = m_all == kNegInf ? 0.0f : m_all;
    const float w_lo = exp2f(lse_lo - m_use);
    const float w_hi = exp2f(lse_hi - m_use);
    float l_all = w_lo + w_hi;
    for (int offset = 16; offset > 0; offset /= 2)
      l_all += __shfl_xor_sync(0xffffffffu, l_all, offset);
    l_all += exp2f(sink - m_use);
    const float scale = l_all > 0.0f ? 1.0f / l_all : 0.0f;
    if (lane < splits) weights[r * splits + lane] = w_lo * scale;
    if (lane + 32 < splits) weights[r * splits + lane + 32] = w_hi * scale;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < rows_here * kDv; i += kThreads) {
    const int r = i / kDv;
    const int d = i % kDv;
    const int head = kv_head * a.group + (row_begin + r) % a.group;
    float o_all = 0.0f;
#pragma unroll 8
    for (int sp = 0; sp < splits; ++sp)
      o_all += weights[r * splits + sp] * __ldcg(cta_o + (sp * 16 + r) * kDv + d);
    const int token = q_begin + (row_begin + r) / a.group;
    a.out[token * a.out_token_stride + head * a.dv_total + dv_offset + d] = __float2bfloat16(o_all);
  }
}

// Writes each real token's K and V rows to the cache at its slot; slot -1 is skipped.
__global__ void write_kv_kernel(const bf16* key, int64_t key_token_stride, int64_t key_head_stride,
                                const bf16* value, int64_t value_token_stride,
                                int64_t value_head_stride, PagedTensor k_cache, PagedTensor v_cache,
                                const int64_t* slot_mapping, int num_heads, int head_size_k,
                                int head_size_v, int block_size) {
  start_after_prior_kernels();
  const int token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t block = slot / block_size;
  const int offset = static_cast<int>(slot % block_size);
  const int pieces_k = head_size_k / 8;
  const int pieces_v = head_size_v / 8;
  for (int i = threadIdx.x; i < num_heads * (pieces_k + pieces_v); i += blockDim.x) {
    const bool is_key = i < num_heads * pieces_k;
    const int j = is_key ? i : i - num_heads * pieces_k;
    const int pieces = is_key ? pieces_k : pieces_v;
    const int head = j / pieces;
    const int piece = j % pieces;
    const PagedTensor& cache = is_key ? k_cache : v_cache;
    const bf16* src = is_key ? key + token * key_token_stride + head * key_head_stride
                             : value + token * value_token_stride + head * value_head_stride;
    bf16* dst = cache.base + block * cache.block_stride + offset * cache.token_stride +
                head * cache.head_stride;
    *reinterpret_cast<uint4*>(dst + piece * 8) = *reinterpret_cast<const uint4*>(src + piece * 8);
  }
}

PagedTensor paged_view(const Tensor& view) {
  // view: [num_blocks, block_size, num_kv_heads, head_size], unit inner stride. The kernel keeps
  // offsets inside a page in 32 bits.
  const int64_t last_in_page =
      (view.size(1) - 1) * view.stride(1) + (view.size(2) - 1) * view.stride(2) + view.size(3);
  PAGODA_CHECK(last_in_page < (int64_t{1} << 31), "a KV page of {} elements is too large",
               last_in_page);
  return {reinterpret_cast<bf16*>(view.raw_data()), view.stride(0), view.stride(1), view.stride(2)};
}

bool aligned_16(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.raw_data()) % 16 != 0) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if (t.stride(d) % 8 != 0) return false;
  }
  return t.stride(t.dim() - 1) == 1;
}

template <int kDk, int kDv, int kRowTiles, int kStages, int kChunk = kDefaultChunk>
struct Kernel {
  using S = Shape<kDk, kDv, kRowTiles, kStages, kChunk>;
  static constexpr int kSliceWidth = kDv;
  static constexpr auto kFunction = attention_kernel<kDk, kDv, kRowTiles, kStages, kChunk>;

  // Raises the kernel's shared-memory limit, once.
  static void prepare() {
    static const bool prepared = [] {
      PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kFunction, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             S::kSmemBytes));
      PAGODA_CUDA_CHECK(cudaFuncSetAttribute(kFunction,
                                             cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared));
      return true;
    }();
    (void)prepared;
  }

  static void launch(const Args& args, int num_seqs, int row_tiles) {
    PAGODA_CHECK(args.dv_slices * kSliceWidth == args.dv_total, "V of {} in slices of {}",
                 args.dv_total, kSliceWidth);
    prepare();
    const dim3 grid(num_seqs, args.num_kv_heads, row_tiles * args.num_splits * args.dv_slices);
    cuda::launch(kFunction, grid, S::kThreads, S::kSmemBytes, stream(), args);
  }
};

// Calls body(Kernel<...>{}) for the instantiation of these head sizes.
template <int kRowTiles, int kStages, typename Body>
void with_kernel(int64_t dk, int64_t dv, Body&& body) {
  if (dk == 16 && dv == 16) return body(Kernel<16, 16, kRowTiles, kStages>{});
  if (dk == 24 && dv == 16) return body(Kernel<32, 16, kRowTiles, kStages>{});  // K padded
  if (dk == 32 && dv == 32) return body(Kernel<32, 32, kRowTiles, kStages>{});
  if (dk == 64 && dv == 64) return body(Kernel<64, 64, kRowTiles, kStages>{});
  if (dk == 128 && dv == 128) return body(Kernel<128, 128, kRowTiles, kStages>{});
  if (dk == 256 && dv == 256) return body(Kernel<256, 256, kRowTiles, kStages>{});
  if (dk == 192 && dv == 128) return body(Kernel<192, 128, kRowTiles, kStages>{});
  // 512-wide heads (Gemma 4's full layers): V in two slices of 256, two stages, and chunks of 32
  // keys for prefill, to fit shared memory.
  if (dk == 512 && dv == 512) {
    return body(Kernel < 512, 256, kRowTiles, 2, kRowTiles == 1 ? 64 : 32 > {});
  }
  fail("CUDA attention has no kernel for head sizes K {} / V {}", dk, dv);
}

// Decode: one row tile; a third stage keeps two chunks in flight while one is used.
constexpr int kDecodeStages = 3;
constexpr int kPrefillStages = 2;

// KV splits per decoding (sequence, KV head): when there are fewer pairs than multiprocessors,
// enough splits to give each one a CTA, each at least four chunks long. Filling every resident
// slot instead (two CTAs a multiprocessor) measured slower: the split merge costs more than the
// second CTA gains.
int64_t choose_decode_splits(int64_t pairs, int64_t max_seq_len) {
  const int64_t by_length =
      std::max<int64_t>(1, max_seq_len / (kMinChunksPerSplit * kDefaultChunk));
  return std::clamp<int64_t>(std::min(multiprocessor_count() / pairs, by_length), 1,
                             kMaxDecodeSplits);
}

}  // namespace

int64_t decode_splits_for(int64_t head_size_k, int64_t head_size_v, int64_t pairs,
                          int64_t max_seq_len) {
  with_kernel<1, kDecodeStages>(head_size_k, head_size_v, [](auto) {});  // known sizes only
  return choose_decode_splits(pairs, max_seq_len);
}

bool paged_attention_supports(int64_t head_size_k, int64_t head_size_v, int64_t q_per_kv) {
  const int64_t k = head_size_k;
  const bool sizes =
      (k == head_size_v && (k == 16 || k == 32 || k == 64 || k == 128 || k == 256 || k == 512)) ||
      (k == 192 && head_size_v == 128) || (k == 24 && head_size_v == 16);
  return sizes && q_per_kv >= 1 && q_per_kv <= 64;
}

void paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                     const Tensor& value, const KvCacheView& cache, AttentionPlan& plan,
                     const Tensor& output) {
  const int64_t hq = params.num_q_heads;
  const int64_t hkv = params.num_kv_heads;
  const int64_t dk = params.head_size_k;
  const int64_t dv = params.head_size_v;
  PAGODA_CHECK(key.defined() == value.defined(), "key and value must both be given or absent");
  PAGODA_CHECK(hq % hkv == 0 && paged_attention_supports(dk, dv, hq / hkv),
               "CUDA attention: {} query / {} KV heads of sizes {} / {}", hq, hkv, dk, dv);
  PAGODA_CHECK(query.dtype() == DType::kBF16 && output.dtype() == DType::kBF16 &&
                   cache.key.dtype() == DType::kBF16 && cache.value.dtype() == DType::kBF16,
               "CUDA attention needs bf16 queries, output and cache");
  PAGODA_CHECK(query.dim() == 3 && query.size(1) == hq && query.size(2) == dk && aligned_16(query),
               "query {} must be [T, {}, {}] with 16-byte aligned rows", query.shape(), hq, dk);
  PAGODA_CHECK(output.is_contiguous() && output.size(1) == hq * dv, "output {}", output.shape());
  PAGODA_CHECK(cache.key.size(1) == plan.block_size() && cache.key.size(2) == hkv &&
                   cache.key.size(3) == dk && cache.value.size(3) == dv && aligned_16(cache.key) &&
                   aligned_16(cache.value),
               "cache view {} / {} does not match the layer", cache.key.shape(),
               cache.value.shape());
  const int64_t tokens = plan.num_actual_tokens();
  if (tokens == 0) return;
  const PagedTensor k_cache = paged_view(cache.key);
  const PagedTensor v_cache = paged_view(cache.value);
  if (key.defined()) {
    PAGODA_CHECK(aligned_16(key) && aligned_16(value) && key.size(1) == hkv && key.size(2) == dk &&
                     value.size(2) == dv,
                 "key {} / value {} for the cache", key.shape(), value.shape());
  }
  Args args{};
  args.q = reinterpret_cast<const bf16*>(query.raw_data());
  args.q_token_stride = query.stride(0);
  args.q_head_stride = query.stride(1);
  args.k = k_cache;
  args.v = v_cache;
  args.out = reinterpret_cast<bf16*>(output.raw_data());
  args.out_token_stride = output.stride(0);
  args.sinks = params.sinks;
  args.scale = params.scale;
  args.softcap = params.logit_softcap;
  args.window = static_cast<int>(params.sliding_window);
  args.num_kv_heads = static_cast<int>(hkv);
  args.group = static_cast<int>(hq / hkv);
  args.head_size_k = static_cast<int>(dk);
  args.dv_total = static_cast<int>(dv);
  with_kernel<1, kDecodeStages>(
      dk, dv, [&](auto kernel) { args.dv_slices = static_cast<int>(dv / kernel.kSliceWidth); });
  args.block_size = static_cast<int>(plan.block_size());
  args.block_divisor = FastDivisor(args.block_size);
  args.query_start = plan.query_start();
  args.seq_lens = plan.seq_lens();
  args.block_table = plan.block_table();
  args.block_table_stride = plan.block_table_stride();

  // Decodes: one row tile of 16 when the query group fits in it; otherwise they go with prefill.
  // The decode kernel writes its tokens' K/V itself; a kernel before it writes the others'.
  const int64_t decodes = args.group <= 16 ? plan.num_decode_seqs() : 0;
  if (key.defined() && tokens > decodes) {
    launch(write_kv_kernel, static_cast<unsigned>(tokens - decodes), 128, 0, stream(),
           reinterpret_cast<const bf16*>(key.raw_data()) + decodes * key.stride(0), key.stride(0),
           key.stride(1),
           reinterpret_cast<const bf16*>(value.raw_data()) + decodes * value.stride(0),
           value.stride(0), value.stride(1), k_cache, v_cache, plan.slot_mapping() + decodes,
           static_cast<int>(hkv), static_cast<int>(dk), static_cast<int>(dv),
           static_cast<int>(plan.block_size()));
  }
  if (decodes > 0) {
    Args d = args;
    d.seq_offset = 0;
    d.num_splits =
        static_cast<int>(plan.fixed_decode_splits > 0
                             ? plan.fixed_decode_splits
                             : decode_splits_for(dk, dv, decodes * hkv, plan.max_seq_len()));
    PAGODA_CHECK(d.num_splits >= 1 && d.num_splits <= kMaxDecodeSplits,
                 "{} decode splits; at most {}", d.num_splits, kMaxDecodeSplits);
    if (key.defined()) {
      d.new_k = reinterpret_cast<const bf16*>(key.raw_data());
      d.new_k_token_stride = key.stride(0);
      d.new_k_head_stride = key.stride(1);
      d.new_v = reinterpret_cast<const bf16*>(value.raw_data());
      d.new_v_token_stride = value.stride(0);
      d.new_v_head_stride = value.stride(1);
      d.slot_mapping = plan.slot_mapping();
    }
    if (d.num_splits > 1) {
      d.partials = plan.partials(decodes * hkv * d.num_splits * 16 * (dv + d.dv_slices));
      d.counters = plan.counters(decodes * hkv * d.dv_slices);
    }
    with_kernel<1, kDecodeStages>(
        dk, dv, [&](auto kernel) { kernel.launch(d, static_cast<int>(decodes), 1); });
  }
  const int64_t rest = plan.num_seqs() - decodes;
  if (rest > 0) {
    Args p = args;
    p.seq_offset = static_cast<int>(decodes);
    p.num_splits = 1;
    const int64_t max_query = std::max<int64_t>(plan.max_prefill_query_len(), 1);
    const int64_t row_tiles = (max_query * args.group + 63) / 64;
    with_kernel<4, kPrefillStages>(dk, dv, [&](auto kernel) {
      kernel.launch(p, static_cast<int>(rest), static_cast<int>(row_tiles));
    });
  }
}

}  // namespace pagoda::cuda
