// Paged prefill on Hopper's warpgroup products (wgmma, sm_90a), for 128-wide bf16 heads.
//
// A CTA serves one (sequence, KV head, tile of 128 query rows), as attention_kernel's prefill
// CTAs do: rows are the (token, head-in-group) pairs of the KV head's query group, token-major,
// and the tiles whose causal ranges run longest start first. It is two warpgroups, each holding 64
// rows. Q and every chunk of K and V sit in shared memory in the products' 128-byte swizzled layout
// (core/cuda/wgmma.cuh), copied there by cp.async, 4 threads to a key's row. Per chunk a
// warpgroup computes S = Q K^T into registers, runs the online softmax on them there (the code of
// attention_kernel), and adds P V, P taken from those registers as the A operand and V read
// N-major. As FlashAttention-3 orders them, chunk c's S = Q K^T is queued, then chunk c - 1's P V,
// so that P V runs beside chunk c's softmax, and the two warpgroups queue their products in turn,
// so that one's softmax runs beside the other's products. No barrier of the whole CTA paces the
// chunks: per stage, one shared-memory barrier counts the copies landed and another the threads
// done with it, so the warpgroups keep their own pace; copies run kStages - 2 chunks ahead.
#pragma once

#include "attention/cuda/attention_kernel.cuh"
#include "core/cuda/wgmma.cuh"

namespace pagoda::cuda::attention {

template <int kChunkKeys, int kStageCount>
struct WarpgroupShape {
  static constexpr int kD = 128;
  static constexpr int kWarpgroups = 2;
  static constexpr int kRows = 64 * kWarpgroups;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kChunk = kChunkKeys;
  // While chunk c is attended, chunks c - 1 (its P V runs beside chunk c's softmax) and c are in
  // use and chunks up to c + kStages - 2 load.
  static constexpr int kStages = kStageCount;
  static_assert(kStages >= 3 && kChunk % 16 == 0);
  static constexpr int kQBytes = kRows * kD * 2;
  static constexpr int kTileBytes = kChunk * kD * 2;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K, then V
  // 1 KiB of slack to align the tiles to the swizzle's atoms.
  static constexpr int kSmemBytes = 1024 + kQBytes + kStages * kStageBytes + kTableWindow * 4;
};

// The row, the first column and the byte offset in a swizzled tile of kTileRows rows of its 16-byte
// piece number `slot`: 8 consecutive slots fill one 128-byte row.
template <int kTileRows>
struct SwizzledPiece {
  int row;
  int column;
  int offset;
  __device__ explicit SwizzledPiece(int slot)
      : row(slot / 8 % kTileRows),
        column((slot / (kTileRows * 8) * 8 + slot % 8) * 8),
        offset(wgmma::swizzled_offset(row, column, kTileRows)) {}
};

// Queues keys [first, first + kChunk) of K and V (those below `end`; the rest zero-filled) into
// swizzled tiles, moving the table window first when the chunk's pages run past it. Each key's
// row is copied by kThreads / kChunk threads, so each finds its row's address once for all its
// pieces of K and V; the threads of a row take consecutive pieces in each round, which keeps
// whole 32-byte sectors to a load instruction.
template <typename S>
__device__ __forceinline__ void load_swizzled_chunk(const Args& a, int seq, int kv_head, int first,
                                                    int end, TableWindow& window,
                                                    unsigned char* k_tile, unsigned char* v_tile) {
  constexpr int kPerRow = S::kThreads / S::kChunk;
  static_assert(S::kThreads % S::kChunk == 0 && S::kD / 8 % kPerRow == 0);
  keep_window<S::kThreads>(a, seq, first, min(first + S::kChunk, end) - 1, window);
  const int key = threadIdx.x / kPerRow;
  const int pos = min(first + key, end - 1);
  const bool valid = first + key < end;
  const int page = a.block_divisor.divide(pos);
  const int64_t block = window.pages[page - window.first_page];
  const int in_page = pos - page * a.block_size;
  const bf16* k_row = static_cast<const bf16*>(a.k.base) + block * a.k.block_stride +
                      in_page * a.k.token_stride + kv_head * a.k.head_stride;
  const bf16* v_row = static_cast<const bf16*>(a.v.base) + block * a.v.block_stride +
                      in_page * a.v.token_stride + kv_head * a.v.head_stride;
#pragma unroll
  for (int i = 0; i < S::kD / 8 / kPerRow; ++i) {
    const int column = (threadIdx.x % kPerRow + i * kPerRow) * 8;
    const int offset = wgmma::swizzled_offset(key, column, S::kChunk);
    copy_16(k_tile + offset, k_row + column, valid);
    copy_16(v_tile + offset, v_row + column, valid);
  }
}

template <int kChunkKeys, int kStageCount>
__global__ void __launch_bounds__(WarpgroupShape<kChunkKeys, kStageCount>::kThreads, 1)
    prefill_wgmma_kernel(const Args a) {
  using S = WarpgroupShape<kChunkKeys, kStageCount>;
  constexpr int kChunk = S::kChunk;
  constexpr int kTiles = kChunk / 8;
  constexpr int kOTiles = S::kD / 8;
  extern __shared__ uint4 shared_raw[];
  // The tiles start at a multiple of 1 KiB of the shared window.
  const uint32_t raw_address = smem_address(shared_raw);
  unsigned char* q_s =
      reinterpret_cast<unsigned char*>(shared_raw) + ((1024 - raw_address % 1024) % 1024);
  unsigned char* stages = q_s + S::kQBytes;
  TableWindow window{reinterpret_cast<int32_t*>(stages + S::kStages * S::kStageBytes)};
  const auto stage = [&](int chunk) { return stages + chunk % S::kStages * S::kStageBytes; };

  const int seq = a.seq_offset + blockIdx.x;
  const int kv_head = blockIdx.y;
  const int row_tile = gridDim.z - 1 - blockIdx.z;  // the longest causal ranges first
  const int q_begin = a.query_start[seq];
  const int q_len = a.query_start[seq + 1] - q_begin;
  const int seq_len = a.seq_lens[seq];
  const int row_begin = row_tile * S::kRows;
  const int num_rows = q_len * a.group;
  if (row_begin >= num_rows) return;  // a tile past a shorter sequence
  const int rows_here = min(S::kRows, num_rows - row_begin);
  const int first_pos = seq_len - q_len;
  const int lowest_pos = first_pos + row_begin / a.group;
  const int highest_pos = first_pos + (row_begin + rows_here - 1) / a.group;
  const int start = owned_before(a, a.window > 0 ? max(0, lowest_pos - a.window + 1) : 0);
  const int end = owned_before(a, highest_pos + 1);
  const int num_chunks = end > start ? (end - start + kChunk - 1) / kChunk : 0;

  const int warpgroup = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  // This thread's CTA rows r0 and r0 + 8, and the keys each sees, by local index.
  const int r0 = warpgroup * 64 + threadIdx.x / 32 % 4 * 16 + lane / 4;
  int row_lo[2];
  int row_hi[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + 8 * i;
    const int pos = first_pos + (row_begin + r) / a.group;
    row_hi[i] = r < rows_here ? owned_before(a, pos + 1) : 0;
    row_lo[i] = a.window > 0 ? owned_before(a, max(0, pos - a.window + 1)) : 0;
  }
  const int common_lo = a.window > 0 ? owned_before(a, max(0, highest_pos - a.window + 1)) : 0;
  const int common_hi = owned_before(a, lowest_pos + 1);
  const ScoreScale score_scale(a);

  // Per stage: `full` completes a phase when every thread's copies of a chunk have landed, `empty`
  // when every thread is done with the chunk's products. The two warpgroups meet only there and
  // in turns at the products (below), so one may run up to a few chunks ahead of the other.
  __shared__ uint64_t full[S::kStages];
  __shared__ uint64_t empty[S::kStages];
  __shared__ uint64_t q_full;  // every thread's copies of Q have landed
  if (threadIdx.x < S::kStages) {
    barrier_init(&full[threadIdx.x], S::kThreads);
    barrier_init(&empty[threadIdx.x], S::kThreads);
  }
  if (threadIdx.x == 0) barrier_init(&q_full, S::kThreads);
  __syncthreads();
  const auto issue = [&](int chunk) {
    if (chunk >= num_chunks) return;
    const int slot = chunk % S::kStages;
    if (chunk >= S::kStages) barrier_wait(&empty[slot], (chunk / S::kStages - 1) & 1);
    load_swizzled_chunk<S>(a, seq, kv_head, start + chunk * kChunk, end, window, stage(chunk),
                           stage(chunk) + S::kTileBytes);
    barrier_arrive_after_copies(&full[slot]);
  };
  const auto await_chunk = [&](int chunk) {
    barrier_wait(&full[chunk % S::kStages], chunk / S::kStages & 1);
    wgmma::fence_shared_for_products();
  };
  const int early = issue_cached_chunks<S::kThreads, kChunk>(
      a, seq, start, num_chunks, owned_before(a, first_pos), S::kStages - 2, window, issue);
  start_after_prior_kernels();
  // Query rows of this tile, rows past the sequence zero, copied by cp.async so that all of a
  // thread's loads are in flight at once; q_full counts them (and the early chunks before them).
  for (int slot = threadIdx.x; slot < S::kRows * S::kD / 8; slot += S::kThreads) {
    const SwizzledPiece<S::kRows> at(slot);
    const int row = row_begin + at.row;
    const bool valid = at.row < rows_here;
    copy_16(q_s + at.offset,
            valid ? a.q + (q_begin + row / a.group) * a.q_token_stride +
                        (kv_head * a.group + row % a.group) * a.q_head_stride + at.column
                  : a.q,
            valid);
  }
  barrier_arrive_after_copies(&q_full);
  for (int c = early; c < S::kStages - 2; ++c)
    issue(c);

  float o[kOTiles][4] = {};
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};
  barrier_wait(&q_full, 0);
  if (num_chunks == 0) {  // rows that see no key here (decode context parallelism)
    write_rows(a, o, m, l, r0, row_begin, rows_here, kv_head, q_begin, 0, 0, 1.0f);
    return;
  }
  const unsigned char* q_rows = q_s + warpgroup * 64 * 128;
  float s[kTiles][4];
  uint32_t p[kChunk / 16][4];  // the probabilities of the chunk before, as P V's A fragments
  float alpha[2];              // O's rescale for them
  // S = Q K^T of a chunk (queued): both K-major, a k16 step 32 bytes along the rows, the second 64
  // columns in the tiles' second block.
  const auto queue_scores = [&](int chunk) {
    const unsigned char* k_tile = stage(chunk);
    wgmma::fence();
#pragma unroll
    for (int kc = 0; kc < S::kD / 16; ++kc) {
      const int column = kc % 4 * 32;
      wgmma::mma_bf16_ss<kChunk>(
          s, wgmma::descriptor(q_rows + kc / 4 * S::kRows * 128 + column, 16, 1024),
          wgmma::descriptor(k_tile + kc / 4 * kChunk * 128 + column, 16, 1024), kc > 0);
    }
    wgmma::commit();
  };
  // O = O * alpha + P V of a chunk (queued). V is N-major: 16 keys (two 8-row groups of 1 KiB) a
  // step, the second 64 columns a tile's block on.
  const auto queue_values = [&](int chunk) {
    rescale(o, alpha);
    const unsigned char* v_tile = stage(chunk) + S::kTileBytes;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      wgmma::mma_bf16_rs_n128_mn_major(
          o, p[kk], wgmma::descriptor(v_tile + kk * 16 * 128, kChunk * 128, 1024));
    }
    wgmma::commit();
  };
  // The scores of a chunk, once its products are done, into probabilities and P's fragments.
  const auto softmax = [&](int chunk) {
    wgmma::hold(s);
    const int chunk_first = start + chunk * kChunk;
    const int chunk_last = chunk_first + kChunk - 1;
    const bool whole = chunk_last < end && chunk_last < common_hi && chunk_first >= common_lo;
    softmax_scores(s, m, l, alpha, score_scale, whole, chunk_first, end, row_lo, row_hi);
  };
  const auto pack_probabilities = [&] {
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      p[kk][0] = pack<bf16>(s[2 * kk][0], s[2 * kk][1]);
      p[kk][1] = pack<bf16>(s[2 * kk][2], s[2 * kk][3]);
      p[kk][2] = pack<bf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p[kk][3] = pack<bf16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };

  wgmma::fence_shared_for_products();  // Q, landed, is visible to the products
  await_chunk(0);
  issue(S::kStages - 2);
  queue_scores(0);
  wgmma::wait<0>();
  softmax(0);
  pack_probabilities();
  // Chunk c's S runs while O is rescaled, then beside chunk c - 1's P V while chunk c's softmax
  // runs. Every product is queued unconditionally: one queued under a branch makes ptxas
  // serialize all of the kernel's products. The warpgroups queue their products in turn (named
  // barriers 1 and 2, warpgroup 0 first), so one's softmax runs beside the other's products.
  if (warpgroup == 1) named_arrive(1, S::kThreads);
  for (int c = 1; c < num_chunks; ++c) {
    issue(c + S::kStages - 2);
    await_chunk(c);
    named_sync(1 + warpgroup, S::kThreads);
    queue_scores(c);
    queue_values(c - 1);
    named_arrive(2 - warpgroup, S::kThreads);
    wgmma::wait<1>();
    softmax(c);
    wgmma::wait<0>();
    wgmma::hold(o);
    barrier_arrive(&empty[(c - 1) % S::kStages]);
    pack_probabilities();
  }
  if (warpgroup == 0) named_sync(1, S::kThreads);  // warpgroup 1's last turn, so none is pending
  queue_values(num_chunks - 1);
  wgmma::wait<0>();
  wgmma::hold(o);
  sum_over_quad(l);
  write_rows(a, o, m, l, r0, row_begin, rows_here, kv_head, q_begin, 0, 0, 1.0f);
}

}  // namespace pagoda::cuda::attention
