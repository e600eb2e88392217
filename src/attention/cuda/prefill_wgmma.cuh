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
//
// prefill_wgmma_producer_kernel computes the same way over chunks of 128 keys, with a third
// warpgroup that only copies (Q, then each chunk's K and V, 2 threads to a key's row) and hands
// most of its registers to the two that compute (setmaxnreg), which then hold twice the scores.
#pragma once

#include "attention/cuda/attention_kernel.cuh"
#include "core/cuda/wgmma.cuh"

namespace pagoda::cuda::attention {

// kProducer: a third warpgroup copies Q, K and V for the two that compute, which take most of its
// registers (setmaxnreg); without one, the two copy for themselves.
template <int kChunkKeys, int kStageCount, bool kProducer = false>
struct WarpgroupShape {
  static constexpr int kD = 128;
  static constexpr int kWarpgroups = 2;  // that compute
  static constexpr int kRows = 64 * kWarpgroups;
  static constexpr int kConsumerThreads = 128 * kWarpgroups;
  static constexpr int kThreads = kConsumerThreads + (kProducer ? 128 : 0);
  static constexpr int kChunk = kChunkKeys;
  // While chunk c is attended, chunks c - 1 (its P V runs beside chunk c's softmax) and c are in
  // use; the other stages load.
  static constexpr int kStages = kStageCount;
  static_assert(kStages >= 3 && kChunk % 16 == 0);
  static constexpr int kQBytes = kRows * kD * 2;
  static constexpr int kTileBytes = kChunk * kD * 2;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K, then V
  // 1 KiB of slack to align the tiles to the swizzle's atoms.
  static constexpr int kSmemBytes = 1024 + kQBytes + kStages * kStageBytes + kTableWindow * 4;
  // A thread's registers in the producer and in the computing warpgroups: 128 x 56 + 256 x 224 is
  // what 384 threads of 168 (one CTA a multiprocessor) hold. At chunks of 128 keys ptxas reports
  // a spill of 4 bytes; 24 to 48 for the producer spill more.
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
  static_assert(!kProducer ||
                128 * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= 384 * 168);
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

// Queues keys [first, first + kChunk) of one of K or V (those below `end`; the rest zero-filled)
// into a swizzled tile: kWorkers threads, this one number `worker`, two to a key's row in each
// pass, so that a load instruction covers whole 32-byte sectors.
template <typename S, int kWorkers>
__device__ __forceinline__ void load_swizzled_tile(const Args& a, const PagedTensor& t,
                                                   const TableWindow& window, int kv_head,
                                                   int first, int end, int worker,
                                                   unsigned char* tile) {
  constexpr int kPerRow = 2;
  constexpr int kRowsPerPass = kWorkers / kPerRow;
  static_assert(kWorkers % kPerRow == 0 && S::kChunk % kRowsPerPass == 0);
#pragma unroll
  for (int pass = 0; pass < S::kChunk / kRowsPerPass; ++pass) {
    const int key = pass * kRowsPerPass + worker / kPerRow;
    const int pos = min(first + key, end - 1);
    const int page = a.block_divisor.divide(pos);
    const int64_t block = window.pages[page - window.first_page];
    const bf16* row = static_cast<const bf16*>(t.base) + block * t.block_stride +
                      (pos - page * a.block_size) * t.token_stride + kv_head * t.head_stride;
#pragma unroll
    for (int i = 0; i < S::kD / 8 / kPerRow; ++i) {
      const int column = (worker % kPerRow + i * kPerRow) * 8;
      copy_16(tile + wgmma::swizzled_offset(key, column, S::kChunk), row + column,
              first + key < end);
    }
  }
}

// Queues the CTA's query rows (rows past the sequence zero) into the swizzled Q tile: kWorkers
// threads, this one number `worker`, all of a thread's copies in flight at once.
template <typename S, int kWorkers>
__device__ __forceinline__ void load_query_rows(const Args& a, int kv_head, int q_begin,
                                                int row_begin, int rows_here, int worker,
                                                unsigned char* q_s) {
  for (int slot = worker; slot < S::kRows * S::kD / 8; slot += kWorkers) {
    const SwizzledPiece<S::kRows> at(slot);
    const int row = row_begin + at.row;
    const bool valid = at.row < rows_here;
    copy_16(q_s + at.offset, valid ? query_row(a, q_begin, kv_head, row) + at.column : a.q, valid);
  }
}

// A CTA's tile of kRows query rows and the keys they see, by local index: [start, end) in
// num_chunks chunks; keys in [common_lo, common_hi) every row sees.
struct WarpgroupTile {
  int seq, kv_head, q_begin, row_begin, rows_here, first_pos, start, end, num_chunks, common_lo,
      common_hi;

  // False for a tile past a shorter sequence.
  __device__ bool take(const Args& a, int rows, int chunk) {
    const CtaPlace place = cta_place(blockIdx.x, blockIdx.z, gridDim.x, gridDim.z, a.num_kv_heads);
    seq = a.seq_offset + place.seq;
    kv_head = place.kv_head;
    // The longest causal ranges first.
    const int row_tile = place.tiles - 1 - place.tile;
    q_begin = a.query_start[seq];
    const int q_len = a.query_start[seq + 1] - q_begin;
    const int seq_len = a.seq_lens[seq];
    row_begin = row_tile * rows;
    const int num_rows = q_len * a.group;
    if (row_begin >= num_rows) return false;
    rows_here = min(rows, num_rows - row_begin);
    first_pos = seq_len - q_len;
    const int lowest_pos = first_pos + row_begin / a.group;
    const int highest_pos = first_pos + (row_begin + rows_here - 1) / a.group;
    start = owned_before(a, a.window > 0 ? max(0, lowest_pos - a.window + 1) : 0);
    end = owned_before(a, highest_pos + 1);
    num_chunks = end > start ? (end - start + chunk - 1) / chunk : 0;
    common_lo = a.window > 0 ? owned_before(a, max(0, highest_pos - a.window + 1)) : 0;
    common_hi = owned_before(a, lowest_pos + 1);
    return true;
  }
};

// One computing warpgroup's state and steps: 64 rows of O, their softmax state, a chunk's scores
// and the probabilities of the chunk before as P V's A fragments.
template <typename S>
struct WarpgroupRows {
  static constexpr int kTiles = S::kChunk / 8;
  static constexpr int kOTiles = S::kD / 8;
  const unsigned char* q_rows;  // the warpgroup's rows of the Q tile
  int r0;                       // this thread's CTA rows r0 and r0 + 8
  int row_lo[2];                // the keys each sees, by local index
  int row_hi[2];
  ScoreScale score_scale;
  float o[kOTiles][4] = {};
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.0f, 0.0f};
  float s[kTiles][4];
  uint32_t p[S::kChunk / 16][4];
  float alpha[2];  // O's rescale for p

  __device__ WarpgroupRows(const Args& a, const WarpgroupTile& t, int warpgroup,
                           const unsigned char* q_s)
      : q_rows(q_s + warpgroup * 64 * 128),
        r0(warpgroup * 64 + threadIdx.x / 32 % 4 * 16 + threadIdx.x % 32 / 4),
        score_scale(a) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + 8 * i;
      const int pos = t.first_pos + (t.row_begin + r) / a.group;
      row_hi[i] = r < t.rows_here ? owned_before(a, pos + 1) : 0;
      row_lo[i] = a.window > 0 ? owned_before(a, max(0, pos - a.window + 1)) : 0;
    }
  }

  // S = Q K^T of a chunk (queued): both K-major, a k16 step 32 bytes along the rows, the second 64
  // columns in the tiles' second block.
  __device__ __forceinline__ void queue_scores(const unsigned char* k_tile) {
    wgmma::fence();
#pragma unroll
    for (int kc = 0; kc < S::kD / 16; ++kc) {
      const int column = kc % 4 * 32;
      wgmma::mma_bf16_ss<S::kChunk>(
          s, wgmma::descriptor(q_rows + kc / 4 * S::kRows * 128 + column, 16, 1024),
          wgmma::descriptor(k_tile + kc / 4 * S::kChunk * 128 + column, 16, 1024), kc > 0);
    }
    wgmma::commit();
  }

  // O = O * alpha + P V of a chunk (queued). V is N-major: 16 keys (two 8-row groups of 1 KiB) a
  // step, the second 64 columns a tile's block on.
  __device__ __forceinline__ void queue_values(const unsigned char* v_tile) {
    rescale(o, alpha);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < S::kChunk / 16; ++kk) {
      wgmma::mma_bf16_rs_n128_mn_major(
          o, p[kk], wgmma::descriptor(v_tile + kk * 16 * 128, S::kChunk * 128, 1024));
    }
    wgmma::commit();
  }

  // The scores of a chunk, once its products are done, into probabilities and P's fragments.
  __device__ __forceinline__ void softmax(const WarpgroupTile& t, int chunk) {
    wgmma::hold(s);
    const int chunk_first = t.start + chunk * S::kChunk;
    const int chunk_last = chunk_first + S::kChunk - 1;
    const bool whole = chunk_last < t.end && chunk_last < t.common_hi && chunk_first >= t.common_lo;
    softmax_scores(s, m, l, alpha, score_scale, whole, chunk_first, t.end, row_lo, row_hi);
  }

  // The probabilities into P's fragments, once the P V that reads the previous ones is done.
  __device__ __forceinline__ void pack_probabilities() {
#pragma unroll
    for (int kk = 0; kk < S::kChunk / 16; ++kk) {
      p[kk][0] = pack<bf16>(s[2 * kk][0], s[2 * kk][1]);
      p[kk][1] = pack<bf16>(s[2 * kk][2], s[2 * kk][3]);
      p[kk][2] = pack<bf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p[kk][3] = pack<bf16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  }

  // The rows' outputs, once the last P V is done.
  __device__ __forceinline__ void write(const Args& a, const WarpgroupTile& t) {
    sum_over_quad(l);
    write_rows(a, o, m, l, r0, t.row_begin, t.rows_here, t.kv_head, t.q_begin, 0, 0, 1.0f);
  }

  // Attends the tile's chunks, K of chunk c at k(c) and V at v(c), with Q in place. ready(c)
  // returns once chunk c's K and chunk c - 1's V (if any) are in and visible to the products;
  // values_ready(c), once chunk c's V is. Each warpgroup arrives on empty[c % kStages] once it is
  // done with chunk c, for every chunk but the last.
  //
  // Chunk c's S runs while O is rescaled, then beside chunk c - 1's P V while chunk c's softmax
  // runs. Every product is queued unconditionally: one queued under a branch makes ptxas
  // serialize all of the kernel's products. The warpgroups queue their products in turn (named
  // barriers 1 and 2, warpgroup 0 first), so one's softmax runs beside the other's products.
  template <typename Tiles, typename Ready, typename ValuesReady>
  __device__ __forceinline__ void attend(const WarpgroupTile& t, const Tiles& tiles, int warpgroup,
                                         uint64_t* empty, const Ready& ready,
                                         const ValuesReady& values_ready) {
    constexpr int kInTurn = S::kConsumerThreads;
    ready(0);
    queue_scores(tiles.k(0));
    wgmma::wait<0>();
    softmax(t, 0);
    pack_probabilities();
    if (warpgroup == 1) named_arrive(1, kInTurn);
    for (int c = 1; c < t.num_chunks; ++c) {
      ready(c);
      named_sync(1 + warpgroup, kInTurn);
      queue_scores(tiles.k(c));
      queue_values(tiles.v(c - 1));
      named_arrive(2 - warpgroup, kInTurn);
      wgmma::wait<1>();
      softmax(t, c);
      wgmma::wait<0>();
      wgmma::hold(o);
      barrier_arrive(&empty[(c - 1) % S::kStages]);
      pack_probabilities();
    }
    if (warpgroup == 0) named_sync(1, kInTurn);  // warpgroup 1's last turn, so none is pending
    values_ready(t.num_chunks - 1);
    queue_values(tiles.v(t.num_chunks - 1));
    wgmma::wait<0>();
    wgmma::hold(o);
  }
};

// The CTA's shared memory: the Q tile, then the stages (each a K tile and a V tile), from a
// multiple of 1 KiB of the shared window, and the table window.
template <typename S>
struct WarpgroupTiles {
  unsigned char* q;
  unsigned char* stages;
  TableWindow window;
  __device__ explicit WarpgroupTiles(uint4* shared)
      : q(reinterpret_cast<unsigned char*>(shared) + (1024 - smem_address(shared) % 1024) % 1024),
        stages(q + S::kQBytes),
        window{reinterpret_cast<int32_t*>(stages + S::kStages * S::kStageBytes)} {}
  __device__ unsigned char* k(int chunk) const {
    return stages + chunk % S::kStages * S::kStageBytes;
  }
  __device__ unsigned char* v(int chunk) const { return k(chunk) + S::kTileBytes; }
};

template <int kChunkKeys, int kStageCount>
__global__ void __launch_bounds__(WarpgroupShape<kChunkKeys, kStageCount>::kThreads, 1)
    prefill_wgmma_kernel(const Args a) {
  using S = WarpgroupShape<kChunkKeys, kStageCount>;
  constexpr int kChunk = S::kChunk;
  extern __shared__ uint4 shared_raw[];
  WarpgroupTiles<S> tiles(shared_raw);

  WarpgroupTile t;
  if (!t.take(a, S::kRows, kChunk)) return;
  const int warpgroup = threadIdx.x / 128;

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
    if (chunk >= t.num_chunks) return;
    const int slot = chunk % S::kStages;
    if (chunk >= S::kStages) barrier_wait(&empty[slot], (chunk / S::kStages - 1) & 1);
    load_swizzled_chunk<S>(a, t.seq, t.kv_head, t.start + chunk * kChunk, t.end, tiles.window,
                           tiles.k(chunk), tiles.v(chunk));
    barrier_arrive_after_copies(&full[slot]);
  };
  const auto await_chunk = [&](int chunk) {
    barrier_wait(&full[chunk % S::kStages], chunk / S::kStages & 1);
    wgmma::fence_shared_for_products();
  };
  const int early = issue_cached_chunks<S::kThreads, kChunk>(a, t.seq, t.start, t.num_chunks,
                                                             owned_before(a, t.first_pos),
                                                             S::kStages - 2, tiles.window, issue);
  start_after_prior_kernels();
  // q_full counts the copies of Q (and of the early chunks before them).
  load_query_rows<S, S::kThreads>(a, t.kv_head, t.q_begin, t.row_begin, t.rows_here, threadIdx.x,
                                  tiles.q);
  barrier_arrive_after_copies(&q_full);
  for (int c = early; c < S::kStages - 2; ++c)
    issue(c);

  WarpgroupRows<S> w(a, t, warpgroup, tiles.q);
  barrier_wait(&q_full, 0);
  if (t.num_chunks == 0) {  // rows that see no key here (decode context parallelism)
    w.write(a, t);
    return;
  }
  // Each chunk's copies are queued as the chunk kStages - 2 before it is attended.
  const auto ready = [&](int chunk) {
    if (chunk == 0) wgmma::fence_shared_for_products();  // Q, landed, is visible to the products
    if (chunk > 0) issue(chunk + S::kStages - 2);
    await_chunk(chunk);
    if (chunk == 0) issue(S::kStages - 2);
  };
  w.attend(t, tiles, warpgroup, empty, ready, [](int) {});
  w.write(a, t);
}

// The same computation with a producer warpgroup (the third): it copies Q and each chunk's K and
// V, and the two computing warpgroups only wait for them. Per stage, `k_full` and `v_full`
// complete a phase when the producer's copies of the chunk's K or V have landed, so a chunk's S
// starts before its V is in; `empty` when both computing warpgroups are done with the stage.
template <int kChunkKeys, int kStageCount>
__global__ void __launch_bounds__(WarpgroupShape<kChunkKeys, kStageCount, true>::kThreads, 1)
    prefill_wgmma_producer_kernel(const Args a) {
  using S = WarpgroupShape<kChunkKeys, kStageCount, true>;
  constexpr int kChunk = S::kChunk;
  constexpr int kProducerThreads = S::kThreads - S::kConsumerThreads;
  extern __shared__ uint4 shared_raw[];
  WarpgroupTiles<S> tiles(shared_raw);

  WarpgroupTile t;
  if (!t.take(a, S::kRows, kChunk)) return;
  const int warpgroup = threadIdx.x / 128;

  __shared__ uint64_t k_full[S::kStages];
  __shared__ uint64_t v_full[S::kStages];
  __shared__ uint64_t empty[S::kStages];
  __shared__ uint64_t q_full;
  if (threadIdx.x < S::kStages) {
    barrier_init(&k_full[threadIdx.x], kProducerThreads);
    barrier_init(&v_full[threadIdx.x], kProducerThreads);
    barrier_init(&empty[threadIdx.x], S::kConsumerThreads);
  }
  if (threadIdx.x == 0) barrier_init(&q_full, kProducerThreads);
  __syncthreads();

  if (warpgroup == S::kWarpgroups) {
    wgmma::lower_registers<S::kProducerRegisters>();
    const int worker = threadIdx.x - S::kConsumerThreads;
    const auto sync = [] { named_sync(3, kProducerThreads); };
    const auto load = [&](int chunk) {
      const int slot = chunk % S::kStages;
      if (chunk >= S::kStages) barrier_wait(&empty[slot], (chunk / S::kStages - 1) & 1);
      const int first = t.start + chunk * kChunk;
      keep_window_among<kProducerThreads>(a, t.seq, first, min(first + kChunk, t.end) - 1,
                                          tiles.window, worker, sync);
      load_swizzled_tile<S, kProducerThreads>(a, a.k, tiles.window, t.kv_head, first, t.end, worker,
                                              tiles.k(chunk));
      barrier_arrive_after_copies(&k_full[slot]);
      load_swizzled_tile<S, kProducerThreads>(a, a.v, tiles.window, t.kv_head, first, t.end, worker,
                                              tiles.v(chunk));
      barrier_arrive_after_copies(&v_full[slot]);
    };
    // As issue_cached_chunks: pages cached before this step's tokens load while the kernels before
    // this one finish.
    if (t.num_chunks > 0) {
      fill_window_among<kProducerThreads>(a, t.seq, a.block_divisor.divide(t.start), tiles.window,
                                          worker, sync);
    }
    const int cached_keys = owned_before(a, t.first_pos);
    int c = 0;
    for (; c < min(t.num_chunks, S::kStages) && t.start + (c + 1) * kChunk <= cached_keys; ++c)
      load(c);
    start_after_prior_kernels();
    load_query_rows<S, kProducerThreads>(a, t.kv_head, t.q_begin, t.row_begin, t.rows_here, worker,
                                         tiles.q);
    barrier_arrive_after_copies(&q_full);
    for (; c < t.num_chunks; ++c)
      load(c);
    copy_commit();   // a group of every copy not yet waited for,
    copy_wait<0>();  // so that no copy outlives its thread
    return;
  }

  wgmma::raise_registers<S::kConsumerRegisters>();
  start_after_prior_kernels();
  WarpgroupRows<S> w(a, t, warpgroup, tiles.q);
  const auto await = [&](uint64_t* barriers, int chunk) {
    barrier_wait(&barriers[chunk % S::kStages], chunk / S::kStages & 1);
  };
  barrier_wait(&q_full, 0);
  if (t.num_chunks == 0) {  // rows that see no key here (decode context parallelism)
    w.write(a, t);
    return;
  }
  const auto ready = [&](int chunk) {
    await(k_full, chunk);
    if (chunk > 0) await(v_full, chunk - 1);
    wgmma::fence_shared_for_products();  // Q, K and V, landed, are visible to the products
  };
  const auto values_ready = [&](int chunk) {
    await(v_full, chunk);
    wgmma::fence_shared_for_products();
  };
  w.attend(t, tiles, warpgroup, empty, ready, values_ready);
  w.write(a, t);
}

}  // namespace pagoda::cuda::attention
