// The paged attention kernel's launch arguments, its shared-memory layout and the loaders that
// queue pages of K and V into it through a window of the block table (see attention_kernel.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attention/cuda/mma.cuh"
#include "core/fast_divisor.h"

namespace pagoda::cuda::attention {

constexpr int kTableWindow = 256;  // block-table entries a CTA keeps in shared memory

// One of K or V in the cache, of elements of the cache's type (bf16 or e4m3). Element offsets;
// the page of block b starts at b * block_stride.
struct PagedTensor {
  void* base;
  int64_t block_stride;
  int64_t token_stride;
  int64_t head_stride;
};

struct Args {
  const bf16* q;  // [T, Hq, Dk]
  int64_t q_token_stride;
  int64_t q_head_stride;
  PagedTensor k, v;
  bf16* out;  // [T, Hq * Dv]
  int64_t out_token_stride;
  const float* sinks;  // [Hq] or null
  float* lse;          // [T, Hq] or null: each row's natural log-sum-exp (the sink's included)
  float scale;         // on q·k, the cache's k_scale included
  float softcap;       // 0: none
  // e4m3 caches: K and V are written times these (1 / k_scale, 1 / v_scale), and the output is
  // multiplied by out_scale (v_scale). bf16 caches ignore them.
  float k_inverse;
  float v_inverse;
  float out_scale;
  int window;  // 0: full attention
  int num_kv_heads;
  int group;        // query heads per KV head
  int head_size_k;  // K's width; the kernel's kDk may be wider, the rest zero
  int dv_total;     // V's width; each CTA computes kDv columns of it
  int dv_slices;    // dv_total / kDv
  int block_size;
  FastDivisor block_divisor;  // by block_size
  const int32_t* query_start;
  const int32_t* seq_lens;
  const int32_t* block_table;
  int64_t block_table_stride;
  int seq_offset;  // first sequence of this launch
  int num_splits;
  // [seqs, Hkv, V slices, splits, 16, kDv] O / l, then [seqs, Hkv, V slices, splits, 16] lse
  float* partials;
  int32_t* counters;  // [seqs, Hkv, V slices]
  // Decode only: this step's K/V rows ([T, Hkv, D], rows of token t at t * stride), which the CTA
  // holding each sequence's last position writes to the cache at slot_mapping[t] first; null when
  // a separate kernel writes them (or there are none).
  const bf16* new_k;
  int64_t new_k_token_stride;
  int64_t new_k_head_stride;
  const bf16* new_v;
  int64_t new_v_token_stride;
  int64_t new_v_head_stride;
  const int64_t* slot_mapping;
  // Decode context parallelism: the cache holds rank context_rank's share of each sequence's
  // tokens, dealt context_interleave at a time over context_size ranks, in order. Keys are walked
  // by their local index; masks use their global positions. context_size 1: every token.
  int context_rank;
  int context_size;
  int context_interleave;
};

// Decode CTAs that fill their stages by tensor copies (kTma): K's and V's pages described as
// tensors of [blocks][2 of tokens and heads, in stride order][head_size / 64][64] bf16, whose
// boxes are kBoxKeys keys of one head (whole rows, swizzled in 128-byte parts), one box a page and
// tensor. Kernels without kTma ignore them.
constexpr int kBoxKeys = 16;
struct PageMaps {
  CUtensorMap k;
  CUtensorMap v;
  int heads_inner;  // 1: the heads' stride is below the tokens' (pages token-major)
};

// How many of positions [0, position) the rank holds.
__device__ __forceinline__ int owned_before(const Args& a, int position) {
  if (a.context_size == 1) return position;
  const int span = a.context_interleave * a.context_size;
  const int into = position % span - a.context_rank * a.context_interleave;
  return position / span * a.context_interleave + min(max(into, 0), a.context_interleave);
}

// The start of query row `row` (its (token, head-in-group) pair, token-major) of the KV head's
// query group, for a sequence whose query tokens start at `q_begin`.
__device__ __forceinline__ const bf16* query_row(const Args& a, int q_begin, int kv_head, int row) {
  return a.q + (q_begin + row / a.group) * a.q_token_stride +
         (kv_head * a.group + row % a.group) * a.q_head_stride;
}

// Elements of T in a 16-byte piece: what one cp.async copies.
template <typename T>
constexpr int kPiece = 16 / static_cast<int>(sizeof(T));

// A kernel's shape for a cache of element type T.
// kRowTiles: the CTA's tiles of 16 query rows; kWarpTiles: how many of them each warp holds.
// kTma: a decode CTA whose stages tensor copies fill (bf16 pages, K and V of equal widths in
// whole 64-column parts).
template <typename T, int kDk, int kDv, int kRowTiles, int kStageCount, int kChunkKeys,
          int kWarpTiles = 1, bool kTmaCopies = false>
struct Shape {
  using Math = MathType<T>;
  static constexpr bool kTma = kTmaCopies;
  static_assert(!kTma || (kRowTiles == 1 && std::is_same_v<T, bf16> && kDk == kDv &&
                          kDk % 64 == 0 && kChunkKeys % kBoxKeys == 0));
  static constexpr bool kWidens = !std::is_same_v<T, Math>;  // e4m3 pages, widened to f16
  static constexpr int kChunk = kChunkKeys;
  static constexpr int kRows = 16 * kRowTiles;
  static_assert(kRowTiles % kWarpTiles == 0 && (kRowTiles > 1 || kWarpTiles == 1));
  // Warps across the rows: each holds kWarpTiles row tiles.
  static constexpr int kRowWarps = kRowTiles / kWarpTiles;
  // Decode CTAs: a warp per 8 keys of a chunk, so that short work still keeps many warps busy;
  // prefill: a warp per kWarpTiles row tiles (4 or 8 warps), each reading every key of a chunk.
  static constexpr int kWarps = kRowTiles == 1 ? kChunkKeys / 8 : kRowWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeyGroups = kWarps / kRowWarps;
  static constexpr int kKeysPerWarp = kChunk / kKeyGroups;
  // Rows of the math type, padded by 16 bytes: ldmatrix without bank conflicts.
  static constexpr int kKStride = kDk + 8;
  static constexpr int kVStride = kDv + 8;
  static constexpr int kQElems = kRows * kKStride;
  // A stage holds a chunk's K rows, then its V rows, as the cache holds them (elements of T, rows
  // padded by 16 bytes); bf16 stages are read in place, e4m3 ones widened into one buffer of
  // math-type rows first.
  static constexpr int kRawKStride = kDk + kPiece<T>;
  static constexpr int kRawVStride = kDv + kPiece<T>;
  // Tensor-copied stages: [key][64-column part][64], K then V, each 128-byte row swizzled (its
  // 16-byte pieces XOR the row's index mod 8), unpadded.
  static constexpr int kStageBytes =
      kTma ? kChunk * (kDk + kDv) * 2 : kChunk * (kRawKStride + kRawVStride) * sizeof(T);
  static constexpr int kWideBytes = kWidens ? kChunk * (kKStride + kVStride) * 2 : 0;
  static constexpr int kStages = kStageCount;
  // The end-of-CTA merge: per (key group, row) m, l and an O row padded to kMergeStride floats,
  // so that a warp's float2 stores of its accumulators hit distinct banks.
  static constexpr int kMergeStride = kDv + 8;
  static constexpr int kMergeFloats = kKeyGroups * kRows * (kMergeStride + 2);
  // Tensor-copied stages start on a 1 KiB boundary (the swizzle's period), and each has a barrier
  // counting its bytes landed and a count of the warps done with it.
  static constexpr int kAlignBytes = kTma ? 1024 : 0;
  static constexpr int kBarrierBytes = kTma ? kStages * 16 : 0;
  // Q, then the K/V stages, the widened rows, the table window and the stages' barriers; the
  // merge reuses the stages.
  static constexpr int kStagedBytes =
      kStages * kStageBytes + kWideBytes + kTableWindow * 4 + kBarrierBytes;
  static constexpr int kSmemBytes =
      kQElems * 2 + kAlignBytes +
      (kStagedBytes > kMergeFloats * 4 ? kStagedBytes : kMergeFloats * 4);
};

// The CTA's window of its sequence's block table, in shared memory: block ids of pages
// [first_page, first_page + kTableWindow). Loads address pages through it, so no copy waits on a
// global read of the table.

struct TableWindow {
  int32_t* pages;  // [kTableWindow] shared
  int first_page = 0;
};

// Fills the window from `first_page`: kWorkers threads, this one number `worker`, which meet at
// sync() after.
template <int kWorkers, typename Sync>
__device__ inline void fill_window_among(const Args& a, int seq, int first_page,
                                         TableWindow& window, int worker, const Sync& sync) {
  const int32_t* table = a.block_table + seq * a.block_table_stride;
  const int last = static_cast<int>(min(a.block_table_stride, int64_t{first_page} + kTableWindow));
  for (int i = worker; i < last - first_page; i += kWorkers)
    window.pages[i] = table[first_page + i];
  window.first_page = first_page;
  sync();
}

// The same, every thread of the CTA taking part.
template <int kThreads>
__device__ inline void fill_window(const Args& a, int seq, int first_page, TableWindow& window) {
  fill_window_among<kThreads>(a, seq, first_page, window, threadIdx.x, [] { __syncthreads(); });
}

// Until the kernels before this one finish, only what they cannot write is read: the step's
// metadata, and pages of positions cached before this step's tokens (earlier kernels write K/V
// only at this step's positions). Fills the table window from the page of key `start` and queues,
// through issue(chunk), up to `limit` of the first of `num_chunks` chunks of kChunk keys that lie
// wholly below `cached_keys`, so that they load while those kernels finish; returns how many.
template <int kThreads, int kChunk, typename Issue>
__device__ __forceinline__ int issue_cached_chunks(const Args& a, int seq, int start,
                                                   int num_chunks, int cached_keys, int limit,
                                                   TableWindow& window, Issue&& issue) {
  if (num_chunks > 0) fill_window<kThreads>(a, seq, a.block_divisor.divide(start), window);
  int early = 0;
  while (early < limit && early < num_chunks && start + (early + 1) * kChunk <= cached_keys)
    issue(early++);
  return early;
}

// Element offset in one of K or V of the row at `pos`, plus `within`: the head's and the piece's
// offset inside the row's page. Within a page every offset fits 32 bits (checked on the host), so
// only the page's start is 64-bit. Loads past `end` copy nothing; their address is kept in range.
__device__ __forceinline__ int64_t row_offset(const Args& a, const PagedTensor& t,
                                              const TableWindow& window, int pos, int32_t within) {
  const int page = a.block_divisor.divide(pos);
  const uint32_t block = window.pages[page - window.first_page];
  const int32_t in_page = (pos - page * a.block_size) * static_cast<int32_t>(t.token_stride);
  return static_cast<int64_t>(block) * t.block_stride + (in_page + within);
}

// Whether the CTA's threads, a 16-byte piece each, cover whole rows in each pass and the passes
// tile the chunk exactly.
template <typename T, int kDim, int kChunk, int kThreads>
__host__ __device__ constexpr bool whole_row_passes() {
  constexpr int kPieces = kDim / kPiece<T>;
  return kThreads % kPieces == 0 && kChunk % (kThreads / kPieces) == 0;
}

// K and V rows of equal width at the same offsets from their bases (one cache tensor holding
// both): one address computation serves the two copies.
template <typename T, int kDim, int kChunk, int kThreads>
__device__ __forceinline__ void load_paired_rows(const Args& a, const TableWindow& window,
                                                 int kv_head, int first, int end, T* k_stage,
                                                 T* v_stage) {
  constexpr int kP = kPiece<T>;
  constexpr int kPieces = kDim / kP;
  constexpr int kStride = kDim + kP;
  constexpr int kKeyStep = kThreads / kPieces;
  const int piece = threadIdx.x % kPieces;
  const int key0 = threadIdx.x / kPieces;
  const auto within = static_cast<int32_t>(kv_head * a.k.head_stride + piece * kP);
#pragma unroll
  for (int j = 0; j < kChunk / kKeyStep; ++j) {
    const int key = key0 + j * kKeyStep;
    const int pos = min(first + key, end - 1);
    const bool valid = first + key < end;
    const int64_t offset = row_offset(a, a.k, window, pos, within);
    copy_16(k_stage + key * kStride + piece * kP, static_cast<const T*>(a.k.base) + offset, valid);
    copy_16(v_stage + key * kStride + piece * kP, static_cast<const T*>(a.v.base) + offset, valid);
  }
}

// Queues the copy of `kDim`-wide rows of keys [first, first + kKeys) of `t` (those below `end`;
// the rest zero-filled) into `rows` [kKeys][kDim + 16 bytes], `width` of each row used (the rest
// zero). The (key, 16-byte piece) items are dealt out over `kCopiers` threads, this one being
// `copier`. With `v_rows`, the same rows of V (as wide as K and at the same offsets, from
// `v_base`) come along.
template <typename T, int kDim, int kKeys, int kCopiers>
__device__ __forceinline__ void load_rows_by_piece(const Args& a, const PagedTensor& t,
                                                   const TableWindow& window, int kv_head,
                                                   int first, int end, int width, int copier,
                                                   T* rows, const void* v_base = nullptr,
                                                   T* v_rows = nullptr) {
  constexpr int kP = kPiece<T>;
  constexpr int kPieces = kDim / kP;
  constexpr int kStride = kDim + kP;
  const int used_pieces = width / kP;
  const auto head = static_cast<int32_t>(kv_head * t.head_stride);
#pragma unroll 4
  for (int i = copier; i < kKeys * kPieces; i += kCopiers) {
    const int key = i / kPieces;
    const int piece = i % kPieces;
    const int pos = min(first + key, end - 1);
    const bool valid = first + key < end && piece < used_pieces;
    const int64_t offset = row_offset(a, t, window, pos, head + min(piece, used_pieces - 1) * kP);
    copy_16(rows + key * kStride + piece * kP, static_cast<const T*>(t.base) + offset, valid);
    if (v_rows != nullptr) {
      copy_16(v_rows + key * kStride + piece * kP, static_cast<const T*>(v_base) + offset, valid);
    }
  }
}

// Queues the copy of `kDim`-wide rows of keys [first, first + kChunk) of `t` (those below `end`;
// the rest zero-filled) into `stage` [kChunk][kDim + 16 bytes]. Where the CTA's threads cover
// whole rows in each pass, each keeps one 16-byte piece of a row and steps over keys, so the piece
// offset is computed once.
template <typename T, int kDim, int kChunk, int kThreads>
__device__ __forceinline__ void load_rows(const Args& a, const PagedTensor& t,
                                          const TableWindow& window, int kv_head, int first,
                                          int end, int width, T* stage) {
  if constexpr (whole_row_passes<T, kDim, kChunk, kThreads>()) {
    constexpr int kP = kPiece<T>;
    constexpr int kPieces = kDim / kP;
    constexpr int kStride = kDim + kP;
    const int used_pieces = width / kP;  // pieces past the row's width are zero
    const auto head = static_cast<int32_t>(kv_head * t.head_stride);
    constexpr int kKeyStep = kThreads / kPieces;
    const int piece = threadIdx.x % kPieces;
    const int key0 = threadIdx.x / kPieces;
    const int used = min(piece, used_pieces - 1);
#pragma unroll
    for (int j = 0; j < kChunk / kKeyStep; ++j) {
      const int key = key0 + j * kKeyStep;
      const int pos = min(first + key, end - 1);
      const bool valid = first + key < end && piece < used_pieces;
      const int64_t offset = row_offset(a, t, window, pos, head + used * kP);
      copy_16(stage + key * kStride + piece * kP, static_cast<const T*>(t.base) + offset, valid);
    }
  } else {
    load_rows_by_piece<T, kDim, kChunk, kThreads>(a, t, window, kv_head, first, end, width,
                                                  threadIdx.x, stage);
  }
}

// Moves the table window to the pages of keys [first, ...) when the chunk's last key at
// `last_pos` lies past it. The kWorkers threads that use the window (this one number `worker`,
// meeting at sync()) call it for the same chunk.
template <int kWorkers, typename Sync>
__device__ __forceinline__ void keep_window_among(const Args& a, int seq, int first, int last_pos,
                                                  TableWindow& window, int worker,
                                                  const Sync& sync) {
  if (a.block_divisor.divide(last_pos) >= window.first_page + kTableWindow) {
    sync();  // every copy from the old window has been issued
    fill_window_among<kWorkers>(a, seq, a.block_divisor.divide(first), window, worker, sync);
  }
}

// The same, every thread of the CTA calling it.
template <int kThreads>
__device__ __forceinline__ void keep_window(const Args& a, int seq, int first, int last_pos,
                                            TableWindow& window) {
  keep_window_among<kThreads>(a, seq, first, last_pos, window, threadIdx.x,
                              [] { __syncthreads(); });
}

// Whether K and V rows sit at the same offsets from their bases (one cache tensor holding both):
// one address computation then serves the two copies.
template <int kDk, int kDv>
__device__ __forceinline__ bool paired_rows(const Args& a) {
  return kDk == kDv && a.head_size_k == kDk && a.dv_slices == 1 &&
         a.k.block_stride == a.v.block_stride && a.k.token_stride == a.v.token_stride &&
         a.k.head_stride == a.v.head_stride;
}

// Queues keys [first, first + kChunk) of K and V into one stage, moving the table window first
// when the chunk's pages run past it.
template <typename T, int kDk, int kDv, int kChunk, int kThreads>
__device__ void load_chunk(const Args& a, const PagedTensor& v, int seq, int kv_head, int first,
                           int end, TableWindow& window, T* k_stage, T* v_stage) {
  keep_window<kThreads>(a, seq, first, min(first + kChunk, end) - 1, window);
  if constexpr (kDk == kDv && whole_row_passes<T, kDk, kChunk, kThreads>()) {
    if (paired_rows<kDk, kDv>(a)) {
      load_paired_rows<T, kDk, kChunk, kThreads>(a, window, kv_head, first, end, k_stage, v_stage);
      return;
    }
  }
  load_rows<T, kDk, kChunk, kThreads>(a, a.k, window, kv_head, first, end, a.head_size_k, k_stage);
  load_rows<T, kDv, kChunk, kThreads>(a, v, window, kv_head, first, end, kDv, v_stage);
}

// Decode: the keys [first, first + kKeys) of a chunk that this warp alone reads, K and V, so warps
// need no barrier between chunks.
template <typename T, int kDk, int kDv, int kKeys>
__device__ __forceinline__ void load_warp_keys(const Args& a, const PagedTensor& v,
                                               const TableWindow& window, int kv_head, int first,
                                               int end, T* k_rows, T* v_rows) {
  const int lane = threadIdx.x % 32;
  if (paired_rows<kDk, kDv>(a)) {
    load_rows_by_piece<T, kDk, kKeys, 32>(a, a.k, window, kv_head, first, end, kDk, lane, k_rows,
                                          a.v.base, v_rows);
    return;
  }
  load_rows_by_piece<T, kDk, kKeys, 32>(a, a.k, window, kv_head, first, end, a.head_size_k, lane,
                                        k_rows);
  load_rows_by_piece<T, kDv, kKeys, 32>(a, v, window, kv_head, first, end, kDv, lane, v_rows);
}

// Widens rows [first, first + kKeys) of an e4m3 stage ([kChunk][kDim + 16]) into the same rows
// of f16 ([kChunk][kDim + 8]), 8 elements at a time, the items dealt out over kWorkers threads.
template <int kDim, int kKeys, int kWorkers>
__device__ __forceinline__ void widen_rows(const e4m3* raw, f16* rows, int first, int worker) {
  constexpr int kPieces = kDim / 8;
#pragma unroll 4
  for (int i = worker; i < kKeys * kPieces; i += kWorkers) {
    const int key = first + i / kPieces;
    const int piece = i % kPieces;
    const uint2 x = *reinterpret_cast<const uint2*>(raw + key * (kDim + 16) + piece * 8);
    *reinterpret_cast<uint4*>(rows + key * (kDim + 8) + piece * 8) = widen_e4m3(x);
  }
}

}  // namespace pagoda::cuda::attention
