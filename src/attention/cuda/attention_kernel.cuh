// Paged attention on tensor cores (mma.sync m16n8k16 and m16n8k8, bf16 in, f32 accumulate; for
// e4m3 pages, f16 in: each chunk's e4m3 rows are copied into shared memory as they are, half the
// bytes of bf16, then widened to f16 rows there, which the bf16 path's loads and products read).
//
// A CTA serves one (sequence, KV head, row tile, KV split). Its query rows are the
// (token, head-in-group) pairs of that KV head's query group, token-major, so a decode token of a
// 32q/8kv model fills 4 of the 16 rows of an mma tile and the KV head's pages are read once for
// all 4 query heads. Keys stream through shared memory in chunks (64 keys, 128 for wide decode
// CTAs, 32 for the prefill of 512-wide heads), pipelined with cp.async (16-byte copies; keys past
// the range are zero-filled). Each key's address comes from the block table and the cache's
// runtime block / token / head strides.
//
// Decode (kRowTiles = 1): the warps (8 over chunks of 64 keys, or 16 over 128) share one row tile
// and take 8 keys of each chunk apiece, so a CTA's chain of dependent instructions per chunk is
// short. Each warp copies its own keys of each chunk and waits only for them; the warps'
// online-softmax states are merged through shared memory at the end. Long contexts split across
// CTAs; each writes a partial (O / l, log2-sum-exp) and the last CTA of a (sequence, KV head) to
// finish merges them, found through a counter it resets for the next launch. Prefill
// (kRowTiles = 4 or 8): each warp owns kWarpTiles row tiles (16 or 32 rows) and reads every key of
// each chunk, so each K and V fragment it loads from shared memory serves kWarpTiles products; the
// last row tiles, whose causal ranges are longest, start first, and each warp writes its rows'
// outputs from registers.
//
// Under decode context parallelism the cache holds one rank's share of each sequence's tokens, in
// order: the CTA walks the local indices of the rank's keys in its rows' range, each row's window
// and causal bound turned into a range of local indices once, and a row that sees none of them
// gets zeros and a log-sum-exp of -inf.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "attention/cuda/cta_place.h"
#include "attention/cuda/paged_tiles.cuh"
#include "core/cuda/launch.h"

namespace pagoda::cuda::attention {

constexpr int kMaxDecodeSplits = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -INFINITY;

// Stores 8 bf16 (a 16-byte piece) at `dst`, a cache row of T: as they are, or times `inverse`
// (1 / the cache's scale) rounded to e4m3.
template <typename T>
__device__ __forceinline__ void store_piece(T* dst, uint4 x, float inverse) {
  if constexpr (std::is_same_v<T, e4m3>) {
    *reinterpret_cast<uint2*>(dst) = narrow_to_e4m3(x, inverse);
  } else {
    *reinterpret_cast<uint4*>(dst) = x;
  }
}

// Scores into the log2 domain: q.k * scale * log2(e), or under a softcap c,
// c * tanh(q.k * scale / c) * log2(e).
struct ScoreScale {
  float scale_log2;
  float softcap_in;  // 0: no softcap
  float softcap_out;
  __device__ explicit ScoreScale(const Args& a)
      : scale_log2(a.scale * kLog2e),
        softcap_in(a.softcap > 0.0f ? a.scale / a.softcap : 0.0f),
        softcap_out(a.softcap * kLog2e) {}
};

// One 16-row tile's scores of a chunk, s[kTiles][4] as mma fragments (s[j][e]: row g + 8 (e / 2),
// key key_base + 8j + 2 (lane % 4) + e % 2): scaled into the log2 domain, masked outside each of
// the thread's two rows' [lo, hi) and past `end` unless the chunk is `whole` (inside every row's
// range), folded into the rows' running maxima m and sums l and turned into probabilities. The
// rows' O accumulators are then due to be multiplied by alpha (rescale).
template <int kTiles>
__device__ __forceinline__ void softmax_scores(float (&s)[kTiles][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], const ScoreScale& sc, bool whole,
                                               int key_base, int end, const int (&lo)[2],
                                               const int (&hi)[2]) {
  const int t4 = threadIdx.x % 4;
  // One branch each for the softcap and the mask, around straight-line code: a branch per
  // element would leave the scheduler blocks of a few instructions.
  if (sc.softcap_in > 0.0f) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[j][e] = sc.softcap_out * tanhf(s[j][e] * sc.softcap_in);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[j][e] *= sc.scale_log2;
    }
  }
  if (!whole) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key_base + j * 8 + t4 * 2 + e % 2;
        const bool visible = key < end && key < hi[e / 2] && key >= lo[e / 2];
        s[j][e] = visible ? s[j][e] : kNegInf;
      }
    }
  }
  float chunk_max[2] = {kNegInf, kNegInf};
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      chunk_max[e / 2] = fmaxf(chunk_max[e / 2], s[j][e]);
  }
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
}

// A thread's two rows of O accumulators times the rows' alpha (from softmax_scores).
template <int kOTiles>
__device__ __forceinline__ void rescale(float (&o)[kOTiles][4], const float (&alpha)[2]) {
  // Once the running maxima settle, most chunks leave O as it is.
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int d = 0; d < kOTiles; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
  }
}

// A row's running sum, of which each lane of a quad holds a part, made whole in every lane.
__device__ __forceinline__ void sum_over_quad(float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
}

// A prefill CTA's output of one thread's two rows, CTA rows r0 and r0 + 8 of the tile starting at
// query row `row_begin` (rows from `rows_here` on are past the sequence), from the rows' whole
// softmax state (m, and l summed over the quad) and O accumulators, two columns a lane, each times
// `out_scale`; with each row's natural log-sum-exp when asked for.
template <int kOTiles>
__device__ __forceinline__ void write_rows(const Args& a, const float (&o)[kOTiles][4],
                                           const float (&m)[2], const float (&l)[2], int r0,
                                           int row_begin, int rows_here, int kv_head, int q_begin,
                                           int dv_offset, int slice, float out_scale) {
  const int t4 = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + 8 * i;
    if (r >= rows_here) continue;
    const int head = kv_head * a.group + (row_begin + r) % a.group;
    const int token = q_begin + (row_begin + r) / a.group;
    const float sink = a.sinks != nullptr ? a.sinks[head] * kLog2e : kNegInf;
    const float m_all = fmaxf(m[i], sink);
    const float m_use = m_all == kNegInf ? 0.0f : m_all;
    const float weight = exp2f(m[i] - m_use);
    const float l_all = l[i] * weight + exp2f(sink - m_use);
    const float factor = l_all > 0.0f ? weight / l_all * out_scale : 0.0f;
    bf16* out = a.out + token * a.out_token_stride + head * a.dv_total + dv_offset + t4 * 2;
#pragma unroll
    for (int d = 0; d < kOTiles; ++d) {
      *reinterpret_cast<__nv_bfloat162*>(out + d * 8) =
          __floats2bfloat162_rn(o[d][2 * i] * factor, o[d][2 * i + 1] * factor);
    }
    if (a.lse != nullptr && slice == 0 && t4 == 0) {
      a.lse[token * a.num_kv_heads * a.group + head] =
          l_all > 0.0f ? (m_use + log2f(l_all)) * kLn2 : kNegInf;
    }
  }
}

// The byte offset of bf16 element `column` of key `key`'s row in a tensor-copied stage's K or V
// rows (kParts 64-column parts): [key][part][64], each 128-byte row (a key's part) with its
// 16-byte pieces XOR the row's index mod 8 (the copies' 128-byte swizzle).
template <int kParts>
__device__ __forceinline__ int boxed_offset(int key, int column) {
  const int row = key * kParts + column / 64;
  return row * 128 + ((column % 64 / 8) ^ (row % 8)) * 16 + column % 8 * 2;
}

// T: the cache's element type, bf16 or e4m3. `maps`: the pages as tensors, for kTma CTAs.
template <typename T, int kDk, int kDv, int kRowTiles, int kStages, int kChunkKeys, int kWarpTiles,
          bool kTma>
__global__ void __launch_bounds__(
    Shape<T, kDk, kDv, kRowTiles, kStages, kChunkKeys, kWarpTiles, kTma>::kThreads)
    attention_kernel(const Args a, const __grid_constant__ PageMaps maps) {
  using S = Shape<T, kDk, kDv, kRowTiles, kStages, kChunkKeys, kWarpTiles, kTma>;
  using M = typename S::Math;
  constexpr int kWT = kWarpTiles;
  constexpr int kThreads = S::kThreads;
  constexpr int kChunk = S::kChunk;
  extern __shared__ uint4 shared_raw[];
  M* q_s = reinterpret_cast<M*>(shared_raw);  // [kRows][kKStride]
  // kStages x ([kChunk][kRawKStride], [kChunk][kRawVStride]) of T (tensor-copied: boxes, see
  // boxed_offset), then (e4m3 pages) the widened rows [kChunk][kKStride], [kChunk][kVStride] of
  // f16, then the table window and (kTma) the stages' barriers and counts.
  auto* stages = reinterpret_cast<unsigned char*>(q_s + S::kQElems);
  if constexpr (kTma) stages += (1024 - smem_address(stages) % 1024) % 1024;
  M* widened = reinterpret_cast<M*>(stages + S::kStages * S::kStageBytes);
  TableWindow window{
      reinterpret_cast<int32_t*>(stages + S::kStages * S::kStageBytes + S::kWideBytes)};
  auto* landed = reinterpret_cast<uint64_t*>(window.pages + kTableWindow);  // [kStages]
  auto* finished = reinterpret_cast<int*>(landed + S::kStages);             // [kStages]

  // A tile is (row tile, split, V slice), the slice fastest; a slice is kDv of V's dv_total
  // columns.
  const CtaPlace place = cta_place(blockIdx.x, blockIdx.z, gridDim.x, gridDim.z, a.num_kv_heads);
  const int seq = a.seq_offset + place.seq;
  const int kv_head = place.kv_head;
  const int tile = place.tile;
  const int slice = tile % a.dv_slices;
  const int row_tiles = place.tiles / (a.num_splits * a.dv_slices);
  const int x_tile = tile / a.dv_slices / a.num_splits;
  const int row_tile = kRowTiles > 1 ? row_tiles - 1 - x_tile : x_tile;  // prefill: last first
  const int split = tile / a.dv_slices % a.num_splits;
  const int dv_offset = slice * kDv;
  PagedTensor v_slice = a.v;
  v_slice.base = static_cast<T*>(a.v.base) + dv_offset;
  const int q_begin = a.query_start[seq];
  const int q_len = a.query_start[seq + 1] - q_begin;
  const int seq_len = a.seq_lens[seq];
  const int row_begin = row_tile * S::kRows;
  const int num_rows = q_len * a.group;
  if (row_begin >= num_rows) return;  // a prefill tile past a shorter sequence (never split)
  const int rows_here = min(S::kRows, num_rows - row_begin);
  const int first_pos = seq_len - q_len;

  // Keys this CTA reads: up to its last row's position, from the first row's window start. Under
  // decode context parallelism, the rank's keys there, by local index.
  // Tensor copies take whole boxes of kBoxKeys keys within a page: the range starts on one, the
  // keys before the first row's window masked.
  const int lowest_pos = first_pos + row_begin / a.group;
  const int highest_pos = first_pos + (row_begin + rows_here - 1) / a.group;
  int kv_lo = owned_before(a, a.window > 0 ? max(0, lowest_pos - a.window + 1) : 0);
  if constexpr (kTma) kv_lo = kv_lo / kBoxKeys * kBoxKeys;
  const int kv_hi = owned_before(a, highest_pos + 1);
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
  const int warp_rows = warp % S::kRowWarps;  // this warp's row tiles: kWT from warp_rows * kWT
  const int warp_keys = warp / S::kRowWarps;  // key group of this warp
  const int g = lane / 4;
  const int t4 = lane % 4;
  // The CTA row of this thread's row i (g or g + 8) of the warp's row tile mt.
  const auto tile_row = [&](int mt, int i) { return (warp_rows * kWT + mt) * 16 + g + 8 * i; };

  // This thread's rows: the keys each sees, by local index, [row_lo, row_hi); a row past the
  // tile sees none.
  int row_lo[kWT][2];
  int row_hi[kWT][2];
#pragma unroll
  for (int mt = 0; mt < kWT; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = tile_row(mt, i);
      const int pos = first_pos + (row_begin + r) / a.group;
      row_hi[mt][i] = r < rows_here ? owned_before(a, pos + 1) : 0;
      row_lo[mt][i] = a.window > 0 ? owned_before(a, max(0, pos - a.window + 1)) : 0;
    }
  }
  // Keys every row of the tile sees: a chunk inside them (the bulk of a long context) needs no
  // mask.
  const int common_lo = a.window > 0 ? owned_before(a, max(0, highest_pos - a.window + 1)) : 0;
  const int common_hi = owned_before(a, lowest_pos + 1);
  const ScoreScale score_scale(a);

  float o[kWT][kDv / 8][4] = {};
  float m[kWT][2];
  float l[kWT][2];
#pragma unroll
  for (int mt = 0; mt < kWT; ++mt) {
    m[mt][0] = m[mt][1] = kNegInf;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  // Chunk c lives in stage c % kStages; kStages - 1 chunks are in flight ahead of the one in use.
  // Decode warps each read only their own keys of a chunk, so each copies them itself and waits
  // for its own copies: no barrier across warps per chunk.
  constexpr bool kWarpCopies = kRowTiles == 1;
  const int warp_first_key = warp_keys * S::kKeysPerWarp;
  auto issue = [&](int chunk) {
    if (chunk < num_chunks) {
      T* stage = reinterpret_cast<T*>(stages + (chunk % S::kStages) * S::kStageBytes);
      const int first = start + chunk * kChunk;
      if constexpr (kWarpCopies) {
        keep_window<kThreads>(a, seq, first, min(first + kChunk, end) - 1, window);
        load_warp_keys<T, kDk, kDv, S::kKeysPerWarp>(
            a, v_slice, window, kv_head, first + warp_first_key, end,
            stage + warp_first_key * S::kRawKStride,
            stage + kChunk * S::kRawKStride + warp_first_key * S::kRawVStride);
      } else {
        load_chunk<T, kDk, kDv, kChunk, kThreads>(a, v_slice, seq, kv_head, first, end, window,
                                                  stage, stage + kChunk * S::kRawKStride);
      }
    }
    copy_commit();  // an empty group keeps the count of groups per chunk fixed
  };
  // Tensor-copied stages: one thread queues a chunk's boxes, a box per page and tensor, on the
  // stage's barrier (the chunk's bytes expected); the last warp done with a stage
  // queues the chunk kStages on. Every box lies in one page (kBoxKeys divides the block size and
  // the chunks start on boxes); boxes past the range are not copied.
  const int32_t* table = a.block_table + seq * a.block_table_stride;
  auto issue_boxes = [&](int chunk) {
    if (chunk >= num_chunks) return;
    const int stage = chunk % S::kStages;
    unsigned char* k_rows = stages + stage * S::kStageBytes;
    unsigned char* v_rows = k_rows + kChunk * kDk * 2;
    const int first = start + chunk * kChunk;
    const int boxes = (min(first + kChunk, end) - first + kBoxKeys - 1) / kBoxKeys;
    // The boxes' block ids, all loads in flight at once, before the copies (which order memory).
    constexpr int kBoxes = kChunk / kBoxKeys;
    int blocks[kBoxes];
#pragma unroll
    for (int b = 0; b < kBoxes; ++b)
      blocks[b] = b < boxes ? __ldg(table + a.block_divisor.divide(first + b * kBoxKeys)) : 0;
    barrier_arrive_expecting(&landed[stage], boxes * kBoxKeys * (kDk + kDv) * 2);
#pragma unroll
    for (int b = 0; b < kBoxes; ++b) {
      if (b >= boxes) break;
      const int pos = first + b * kBoxKeys;
      const int token = pos - a.block_divisor.divide(pos) * a.block_size;
      const int inner = maps.heads_inner ? kv_head : token;
      const int outer = maps.heads_inner ? token : kv_head;
      const int offset = b * kBoxKeys * kDk * 2;
      copy_box_5d(k_rows + offset, &maps.k, 0, 0, inner, outer, blocks[b], &landed[stage]);
      copy_box_5d(v_rows + offset, &maps.v, 0, 0, inner, outer, blocks[b], &landed[stage]);
    }
  };
  int early = 0;
  if constexpr (kTma) {
    // Chunks of keys cached before this step go out before the kernels before this one finish.
    if (threadIdx.x == 0) {
      for (int i = 0; i < S::kStages; ++i) {
        barrier_init(&landed[i], 1);
        finished[i] = 0;
      }
      fence_barrier_init();
      const int cached_keys = owned_before(a, first_pos);
      while (early < S::kStages && early < num_chunks &&
             start + (early + 1) * kChunk <= cached_keys)
        issue_boxes(early++);
    }
  } else {
    early = issue_cached_chunks<kThreads, kChunk>(
        a, seq, start, num_chunks, owned_before(a, first_pos), S::kStages - 1, window, issue);
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
        const PagedTensor cache = is_key ? a.k : v_slice;  // a copy: v_slice stays in registers
        const bf16* src =
            is_key ? a.new_k + q_begin * a.new_k_token_stride + kv_head * a.new_k_head_stride
                   : a.new_v + q_begin * a.new_v_token_stride + kv_head * a.new_v_head_stride +
                         dv_offset;
        T* dst = static_cast<T*>(cache.base) + block * cache.block_stride +
                 offset * cache.token_stride + kv_head * cache.head_stride;
        store_piece(dst + piece * 8, *reinterpret_cast<const uint4*>(src + piece * 8),
                    is_key ? a.k_inverse : a.v_inverse);
      }
    }
    if constexpr (kTma) fence_proxy_async_global();  // before tensor copies read the rows
    __syncthreads();  // the rows are written before any copy of them is issued
  }
  if constexpr (kTma) {
    if (threadIdx.x == 0) {
      for (int c = early; c < S::kStages; ++c)
        issue_boxes(c);
    }
  } else {
    for (int c = early; c < S::kStages - 1; ++c)
      issue(c);
  }
  // Query rows of this tile; rows past the sequence are zero. A barrier publishes them: the
  // loop's first, or for decode warps, which have none in the loop, the one after. A prefill CTA's
  // bf16 rows (16 pieces a thread) are copied by cp.async, so that a thread's loads are all in
  // flight at once (each load into registers waited for its store before the next went out), as one
  // group, which the loop's first wait covers (with two stages it waits for every group). A decode
  // CTA's rows (a piece a thread) and f16 ones (converted on the way) are loaded.
  constexpr bool kCopyQ = !kWarpCopies && !S::kWidens;
  static_assert(!kCopyQ || S::kStages == 2);
  for (int i = threadIdx.x; i < S::kRows * (kDk / 8); i += kThreads) {
    const int r = i / (kDk / 8);
    const int piece = i % (kDk / 8);
    const int row = row_begin + r;
    const bool valid = r < rows_here && piece * 8 < a.head_size_k;
    const bf16* src = valid ? query_row(a, q_begin, kv_head, row) + piece * 8 : a.q;
    M* dst = q_s + r * S::kKStride + piece * 8;
    if constexpr (kCopyQ) {
      copy_16(dst, src, valid);
    } else {
      const uint4 value = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dst) = to_math<M>(value);
    }
  }
  if constexpr (kCopyQ) copy_commit();
  if constexpr (kWarpCopies) __syncthreads();
  for (int c = 0; c < num_chunks; ++c) {
    if constexpr (kTma) {
      barrier_wait(&landed[c % S::kStages], c / S::kStages % 2);
      // V rows past the range (a box's tail, or a stage's older rows) are zeroed: their
      // probabilities are 0, but whatever the page or stage held there need not be finite.
      const int past = end - (start + c * kChunk);
      if (past < kChunk) {
        unsigned char* v_rows = stages + c % S::kStages * S::kStageBytes + kChunk * kDk * 2;
        constexpr int kPieces = S::kKeysPerWarp * kDv / 8;
        for (int i = lane; i < kPieces; i += 32) {
          const int key = warp_first_key + i / (kDv / 8);
          const int column = i % (kDv / 8) * 8;
          if (key >= past) {
            *reinterpret_cast<uint4*>(v_rows + boxed_offset<kDv / 64>(key, column)) =
                make_uint4(0, 0, 0, 0);
          }
        }
        __syncwarp();
      }
    } else {
      copy_wait<S::kStages - 2>();
      // Chunk c is visible to all (or, to each decode warp, its keys of it), and every warp is
      // done with chunk c - 1, whose stage is refilled.
      if constexpr (kWarpCopies) {
        __syncwarp();
      } else {
        __syncthreads();
      }
      issue(c + S::kStages - 1);
    }

    const M* k_s;
    if constexpr (S::kWidens) {
      // The chunk's e4m3 rows (a decode warp's own keys) widened to f16 rows, then read as bf16
      // stages are: a warp's own rows need only its own barrier.
      const auto* raw = reinterpret_cast<const T*>(stages + (c % S::kStages) * S::kStageBytes);
      const int first = kWarpCopies ? warp_first_key : 0;
      constexpr int kKeys = kWarpCopies ? S::kKeysPerWarp : kChunk;
      constexpr int kWorkers = kWarpCopies ? 32 : kThreads;
      const int worker = kWarpCopies ? lane : threadIdx.x;
      widen_rows<kDk, kKeys, kWorkers>(raw, widened, first, worker);
      widen_rows<kDv, kKeys, kWorkers>(raw + kChunk * S::kRawKStride,
                                       widened + kChunk * S::kKStride, first, worker);
      if constexpr (kWarpCopies) {
        __syncwarp();
      } else {
        __syncthreads();
      }
      k_s = widened;
    } else {
      k_s = reinterpret_cast<const M*>(stages + (c % S::kStages) * S::kStageBytes);
    }
    const M* v_s = k_s + kChunk * S::kKStride;
    const M* k_warp = k_s + warp_keys * S::kKeysPerWarp * S::kKStride;
    const M* v_warp = v_s + warp_keys * S::kKeysPerWarp * S::kVStride;
    constexpr int kTiles = S::kKeysPerWarp / 8;

    float s[kWT][kTiles][4] = {};
#pragma unroll
    for (int kc = 0; kc < kDk / 16; ++kc) {
      uint32_t qa[kWT][4];
#pragma unroll
      for (int mt = 0; mt < kWT; ++mt) {
        load_matrix_x4(qa[mt], q_s + ((warp_rows * kWT + mt) * 16 + lane % 16) * S::kKStride +
                                   kc * 16 + (lane / 16) * 8);
      }
      if constexpr (kTiles == 1) {
        uint32_t kb[2];
        if constexpr (kTma) {
          load_matrix_x2(kb, reinterpret_cast<const unsigned char*>(k_s) +
                                 boxed_offset<kDk / 64>(warp_first_key + lane % 8,
                                                        kc * 16 + (lane / 8) % 2 * 8));
        } else {
          load_matrix_x2(kb, k_warp + (lane % 8) * S::kKStride + kc * 16 + ((lane / 8) % 2) * 8);
        }
#pragma unroll
        for (int mt = 0; mt < kWT; ++mt)
          mma<M>(s[mt][0], qa[mt], kb[0], kb[1]);
      } else {
#pragma unroll
        for (int j = 0; j < kTiles; j += 2) {
          uint32_t kb[4];
          load_matrix_x4(kb, k_warp + ((j + lane / 16) * 8 + lane % 8) * S::kKStride + kc * 16 +
                                 ((lane / 8) % 2) * 8);
#pragma unroll
          for (int mt = 0; mt < kWT; ++mt) {
            mma<M>(s[mt][j], qa[mt], kb[0], kb[1]);
            mma<M>(s[mt][j + 1], qa[mt], kb[2], kb[3]);
          }
        }
      }
    }

    // A chunk wholly inside every row's visible range (the bulk of a long context) skips the mask.
    const int key_base = start + c * kChunk + warp_keys * S::kKeysPerWarp;
    const int chunk_first = start + c * kChunk;
    const int chunk_last = chunk_first + kChunk - 1;
    const bool whole = chunk_last < end && chunk_last < common_hi && chunk_first >= common_lo;
#pragma unroll
    for (int mt = 0; mt < kWT; ++mt) {
      float alpha[2];
      softmax_scores(s[mt], m[mt], l[mt], alpha, score_scale, whole, key_base, end, row_lo[mt],
                     row_hi[mt]);
      rescale(o[mt], alpha);
    }

    // O += P · V, P taken from the score accumulators as the A operand.
    if constexpr (kTiles == 1) {
      // 8 keys: k8 products, four V column tiles per ldmatrix (two for 16-wide V).
      static_assert(kWT == 1, "decode warps hold one row tile");
      const uint32_t p0 = pack<M>(s[0][0][0], s[0][0][1]);
      const uint32_t p1 = pack<M>(s[0][0][2], s[0][0][3]);
      constexpr int kTilesPerLoad = kDv / 8 % 4 == 0 ? 4 : 2;
#pragma unroll
      for (int d = 0; d < kDv / 8; d += kTilesPerLoad) {
        const M* v_rows;
        if constexpr (kTma) {
          v_rows = reinterpret_cast<const M*>(
              reinterpret_cast<const unsigned char*>(k_s) + kChunk * kDk * 2 +
              boxed_offset<kDv / 64>(warp_first_key + lane % 8,
                                     (d + (lane / 8) % kTilesPerLoad) * 8));
        } else {
          v_rows = v_warp + (lane % 8) * S::kVStride + (d + (lane / 8) % kTilesPerLoad) * 8;
        }
        if constexpr (kTilesPerLoad == 4) {
          uint32_t vb[4];
          load_matrix_x4_trans(vb, v_rows);
#pragma unroll
          for (int t = 0; t < 4; ++t)
            mma_k8<M>(o[0][d + t], p0, p1, vb[t]);
        } else {
          uint32_t vb[2];
          load_matrix_x2_trans(vb, v_rows);
          mma_k8<M>(o[0][d], p0, p1, vb[0]);
          mma_k8<M>(o[0][d + 1], p0, p1, vb[1]);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < S::kKeysPerWarp / 16; ++kk) {
        uint32_t pa[kWT][4];
#pragma unroll
        for (int mt = 0; mt < kWT; ++mt) {
          pa[mt][0] = pack<M>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack<M>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack<M>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack<M>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int d = 0; d < kDv / 8; d += 2) {
          uint32_t vb[4];
          load_matrix_x4_trans(vb,
                               v_warp + (kk * 16 + lane % 16) * S::kVStride + (d + lane / 16) * 8);
#pragma unroll
          for (int mt = 0; mt < kWT; ++mt) {
            mma<M>(o[mt][d], pa[mt], vb[0], vb[1]);
            mma<M>(o[mt][d + 1], pa[mt], vb[2], vb[3]);
          }
        }
      }
    }
    if constexpr (kTma) {
      // This warp is done reading the stage; the last of the kWarps to finish it (its count
      // passing (c / kStages + 1) * kWarps) queues the chunk that refills it, after a fence that
      // orders the warps' reads (and zeroing) before the copies' writes.
      __syncwarp();
      if (lane == 0) {
        __threadfence_block();
        const int done = atomicAdd(&finished[c % S::kStages], 1);
        if (done == (c / S::kStages + 1) * S::kWarps - 1) {
          __threadfence_block();
          fence_proxy_async_shared();
          issue_boxes(c + S::kStages);
        }
      }
    }
  }
  // e4m3 V was stored divided by its scale: every output (a weighted mean of V) is times it.
  const auto rescaled = [&](float o) {
    if constexpr (S::kWidens) {
      return o * a.out_scale;
    } else {
      return o;
    }
  };
#pragma unroll
  for (int mt = 0; mt < kWT; ++mt)
    sum_over_quad(l[mt]);

  if constexpr (S::kKeyGroups == 1) {
    // Prefill (one key group, never split: Kernel::launch checks): each row's state is whole in
    // its warp, so the output goes straight from registers, two columns a lane.
    const float out_scale = S::kWidens ? a.out_scale : 1.0f;
#pragma unroll
    for (int mt = 0; mt < kWT; ++mt) {
      write_rows(a, o[mt], m[mt], l[mt], tile_row(mt, 0), row_begin, rows_here, kv_head, q_begin,
                 dv_offset, slice, out_scale);
    }
    return;
  }
  copy_wait<0>();
  __syncthreads();

  // Every warp's state to shared memory: m, l, then O, per (key group, row). Only real rows: a
  // decode of a 4-head query group fills 4 of the tile's 16.
  float* merge_m = reinterpret_cast<float*>(stages);
  float* merge_l = merge_m + S::kKeyGroups * S::kRows;
  float* merge_o = merge_l + S::kKeyGroups * S::kRows;
#pragma unroll
  for (int mt = 0; mt < kWT; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = tile_row(mt, i);
      if (row >= rows_here) continue;
      const int slot = warp_keys * S::kRows + row;
      if (t4 == 0) {
        merge_m[slot] = m[mt][i];
        merge_l[slot] = l[mt][i];
      }
#pragma unroll
      for (int d = 0; d < kDv / 8; ++d) {
        *reinterpret_cast<float2*>(merge_o + slot * S::kMergeStride + d * 8 + t4 * 2) =
            make_float2(o[mt][d][2 * i], o[mt][d][2 * i + 1]);
      }
    }
  }
  __syncthreads();

  const bool split_kv = splits > 1;
  // Partial results and the counter of one (sequence, KV head, row tile, V slice).
  const int64_t cta =
      ((static_cast<int64_t>(place.seq) * a.num_kv_heads + kv_head) * row_tiles + row_tile) *
          a.dv_slices +
      slice;
  const int64_t partial_index = cta * a.num_splits + split;
  float* partial_o = a.partials + partial_index * 16 * kDv;
  float* partial_lse = a.partials +
                       static_cast<int64_t>(gridDim.z) * a.num_kv_heads * row_tiles * a.dv_slices *
                           a.num_splits * 16 * kDv +
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
      o_all += merge_o[(w * S::kRows + r) * S::kMergeStride + d] * weight;
    }
    if (!split_kv) {
      const int token = q_begin + (row_begin + r) / a.group;
      a.out[token * a.out_token_stride + head * a.dv_total + dv_offset + d] =
          __float2bfloat16(rescaled(l_all > 0.0f ? o_all / l_all : 0.0f));
      if (a.lse != nullptr && slice == 0 && d == 0) {
        a.lse[token * a.num_kv_heads * a.group + head] =
            l_all > 0.0f ? (m_use + log2f(l_all)) * kLn2 : kNegInf;
      }
    } else {
      partial_o[r * kDv + d] = l_all > 0.0f ? o_all / l_all : 0.0f;
      if (d == 0) partial_lse[r] = l_all > 0.0f ? m_use + log2f(l_all) : kNegInf;
    }
  }
  if (!split_kv) return;

  // The last split of this (sequence, KV head, row tile, V slice) to finish merges every split's
  // partial result.
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
    if (a.lse != nullptr && slice == 0 && lane == 0) {
      const int token = q_begin + (row_begin + r) / a.group;
      a.lse[token * a.num_kv_heads * a.group + head] =
          l_all > 0.0f ? (m_use + log2f(l_all)) * kLn2 : kNegInf;
    }
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
    a.out[token * a.out_token_stride + head * a.dv_total + dv_offset + d] =
        __float2bfloat16(rescaled(o_all));
  }
}

}  // namespace pagoda::cuda::attention
