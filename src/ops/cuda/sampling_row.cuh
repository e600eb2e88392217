// The device code of cuda::sample() (sampling.cu): one CTA of kThreads threads per row. Greedy
// rows take the argmax. The other rows draw the token sample_token() draws on the host, without
// sorting. sample_token() orders the tokens most likely first (ties by the lower id), keeps a
// prefix of that order (min-p, top-k, top-p) and walks it until the running probability passes
// the draw: each of those cuts and the draw is a place where a running tally over the sorted
// tokens passes a target, and the CTA finds each such place by selection:
// - the row's finite logits fall into linear bins of (max - logit), which keep the sorted order;
//   one pass over the row counts each bin's tokens and their weights;
// - a scan of the bins finds the one holding the crossing, and the CTA gathers that bin's tokens
//   and sorts them on chip (a bin of more than kCandidates tokens is first narrowed by radix digits
//   of the sort key, a pass per digit), then scans them;
// - where the bins up to a filter's crossing hold few enough tokens to sort on chip, the CTA
//   gathers all of them instead: that head of the sorted order answers the row's later crossings
//   (the next filter's, the draw) by a scan, without another pass over the row.
// Weights are exp((logit - max) / T) in f32 as the host computes them up to rounding, tallied in
// fixed point (a weight is at most 1), so every sum is exact whatever order the threads add in,
// and a row's draw repeats. A row that judges a draft (speculative decoding) applies the lossless
// rule of accept_drafts() the same way, over the drafter's row and its own.
//
// A row may be shared by a cluster of CTAs (at small batch, where one CTA alone on a row is bound
// by its instructions per logit): each CTA passes over its slice of the row, and the counts,
// weights and gathered tokens of the slices meet through distributed shared memory, in rank
// order, so that every CTA of the cluster then scans and sorts the same values and reaches the
// same cuts. Rank 0 writes the row's outputs.
//
// Only the CUDA built-ins (cooperative groups' cluster calls among them) and the C library, so
// that a host emulation of the built-ins runs it too (tests/ops/sampling_emulation_test.cc).
#pragma once

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "ops/sampling_row.h"

#ifdef __CUDACC__
#include <cooperative_groups.h>
#endif

namespace pagoda::cuda::sampling {

// The larger steps are functions of their own on the device, so that each one's loops have the
// registers to themselves (inlined into one, they spill). They are static: the host side of a CUDA
// compilation keeps stubs of such functions, which must not stand in for the host emulation's.
#ifdef __CUDACC__
#define PAGODA_SAMPLING_CALL static __noinline__
#else
#define PAGODA_SAMPLING_CALL inline
#endif

#ifdef __CUDACC__
__device__ __forceinline__ unsigned cluster_rank() {
  return cooperative_groups::this_cluster().block_rank();
}
__device__ __forceinline__ unsigned cluster_size() {
  return cooperative_groups::this_cluster().num_blocks();
}
__device__ __forceinline__ void cluster_sync() {
  cooperative_groups::this_cluster().sync();
}
// The cluster CTA `rank`'s copy of the shared object `local` points to.
template <typename T>
__device__ __forceinline__ T* cluster_peer(T* local, unsigned rank) {
  return cooperative_groups::this_cluster().map_shared_rank(local, rank);
}
#endif

// CTAs a cluster may have (the portable limit); a warp reads the CTAs' values a lane each.
constexpr int kMaxCluster = 8;
static_assert(kMaxCluster <= 32);

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = kThreads;        // a bin per thread when the histogram is scanned
constexpr int kCandidates = kThreads;  // a token per thread when a gathered set is scanned
constexpr int kDigitBits = 10;         // a radix digit narrowing a set: kBins values
static_assert(kBins == 1 << kDigitBits);
constexpr int kPerThread = 8;  // consecutive logits a thread takes at each step of a pass

// logits[0, kPerThread) into v, from a 16-byte aligned address: two vector loads, both in flight.
__device__ __forceinline__ void load_aligned(const float* logits, float (&v)[kPerThread]) {
#ifdef __CUDACC__
  static_assert(kPerThread == 8);
  const float4 a = reinterpret_cast<const float4*>(logits)[0];
  const float4 b = reinterpret_cast<const float4*>(logits)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
#else
  for (int j = 0; j < kPerThread; ++j)
    v[j] = logits[j];
#endif
}

// This CTA's slice [begin, end) of a row of `vocab` logits: the cluster's CTAs take equal slices,
// in rank order, each a whole number of kPerThread logits.
struct Slice {
  int begin;
  int end;
};

__device__ __forceinline__ Slice slice_of(int vocab) {
  const int size = cluster_size();
  const int per = ((vocab + size - 1) / size + kPerThread - 1) / kPerThread * kPerThread;
  const int64_t begin = static_cast<int64_t>(cluster_rank()) * per;
  const int64_t end = begin + per;
  return {static_cast<int>(begin < vocab ? begin : vocab),
          static_cast<int>(end < vocab ? end : vocab)};
}

// One pass over this CTA's slice of a row of `vocab` logits: body(i, logit) for the kPerThread
// consecutive indices a thread takes at each step, loaded together (so each warp keeps a kilobyte
// in flight rather than 128 bytes). Every thread makes the same calls, so that bodies may take
// whole-warp ballots: places past the slice come as index `vocab` with a logit of -infinity, and
// bodies skip them.
template <typename Body>
__device__ __forceinline__ void for_each_logit(const float* logits, int vocab, Body&& body) {
  const Slice slice = slice_of(vocab);
  const bool aligned = reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  for (int start = slice.begin; start < slice.end; start += kThreads * kPerThread) {
    const int first = start + static_cast<int>(threadIdx.x) * kPerThread;
    float v[kPerThread];
    if (aligned && first + kPerThread <= slice.end) {
      load_aligned(logits + first, v);
    } else {
      for (int j = 0; j < kPerThread; ++j)
        v[j] = first + j < slice.end ? logits[first + j] : -INFINITY;
    }
    for (int j = 0; j < kPerThread; ++j)
      body(first + j < slice.end ? first + j : vocab, v[j]);
  }
}

// The running argmax of part of a row, and Σ exp(logit - value) over that part.
struct Best {
  float value;
  int index;
  float sum;
};

// The larger value; on a tie the lower index, as the host sampler chooses. The sums meet at the
// larger value.
__device__ __forceinline__ Best better(Best a, Best b) {
  const bool b_wins = b.value > a.value || (b.value == a.value && b.index < a.index);
  const Best top = b_wins ? b : a;
  const Best other = b_wins ? a : b;
  return {top.value, top.index, top.sum + other.sum * expf(other.value - top.value)};
}

__device__ __forceinline__ float warp_lowest(float lowest) {
  for (int offset = 16; offset > 0; offset /= 2)
    lowest = fminf(lowest, __shfl_xor_sync(0xffffffffu, lowest, offset));
  return lowest;
}

__device__ __forceinline__ Best warp_best(Best best) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset),
                     __shfl_xor_sync(0xffffffffu, best.index, offset),
                     __shfl_xor_sync(0xffffffffu, best.sum, offset)};
    best = better(best, other);
  }
  return best;
}

// A token's place in the sorted order: ascending keys put larger logits first, equal logits (-0
// and +0 too) by the lower id.
__device__ __forceinline__ uint64_t sort_key(float logit, int id) {
  const uint32_t bits = __float_as_uint(logit == 0.0f ? 0.0f : logit);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(id);
}

__device__ __forceinline__ int id_of(uint64_t key) {
  return static_cast<int>(static_cast<uint32_t>(key));
}

__device__ __forceinline__ float logit_of(uint64_t key) {
  const uint32_t ascending = ~static_cast<uint32_t>(key >> 32);
  return __uint_as_float((ascending & 0x80000000u) ? ascending & 0x7fffffffu : ~ascending);
}

// A set of a row's tokens: those of bins [first_bin, bin] whose sort keys begin with `prefix`,
// `level` digits long (only a set of one bin is narrowed by digits).
struct Set {
  const float* logits;
  int first_bin;
  int bin;
  int level;
  uint64_t prefix;

  __device__ bool operator==(const Set& other) const {
    return logits == other.logits && first_bin == other.first_bin && bin == other.bin &&
           level == other.level && prefix == other.prefix;
  }
  __device__ bool holds_bin(int b) const { return b >= first_bin && b <= bin; }
  // Whether the set is the head of its row's sorted order: every token of bins [0, bin].
  __device__ bool is_head() const { return first_bin == 0 && level == 0; }
  __device__ bool holds(uint64_t key) const {
    return level == 0 || key >> (64 - kDigitBits * level) == prefix;
  }
  // The key's digit after the prefix.
  __device__ int digit(uint64_t key) const {
    return static_cast<int>((key << (kDigitBits * level)) >> (64 - kDigitBits));
  }
};

struct Shared {
  Best bests[kWarps];
  float lowests[kWarps];
  uint64_t scratch[kWarps];  // block reductions and scans, of values of up to 8 bytes
  uint64_t below;
  int first;
  int gathered;
  // The row's histogram: tokens and their fixed-point weight per bin.
  int bin_count[kBins];
  uint64_t bin_weight[kBins];
  // A narrower one: a set's tokens by their next digit, or a residual's weight per bin.
  int digit_count[kBins];
  uint64_t digit_weight[kBins];
  // The tokens of one set, sorted, and which set that is.
  uint64_t keys[kCandidates];
  Set sorted;
  int sorted_count;
  // What this CTA's slice gives the cluster: a histogram (or digit counts), or the tokens it
  // gathered, and the slice's scalars; read by every CTA of the cluster between two cluster
  // barriers.
  union {
    struct {
      int count[kBins];
      uint64_t weight[kBins];
    } histogram;
    uint64_t keys[kCandidates];
  } slice;
  Best slice_best;
  float slice_lowest;
  int slice_count;
  uint64_t slice_key;
};

// The cluster CTA `rank`'s copy of `member`, a part of `sh`.
template <typename T>
__device__ T* peer_member(Shared& sh, T* member, unsigned rank) {
  const auto offset = reinterpret_cast<char*>(member) - reinterpret_cast<char*>(&sh);
  return reinterpret_cast<T*>(reinterpret_cast<char*>(cluster_peer(&sh, rank)) + offset);
}

// The cluster CTA whose rank is this thread's lane, or null past the cluster's CTAs: a warp
// reads a value of every CTA at once.
__device__ __forceinline__ const Shared* lane_peer(Shared& sh) {
  const unsigned lane = threadIdx.x % 32;
  return lane < cluster_size() ? cluster_peer(&sh, lane) : nullptr;
}

// *sum += tally, where other threads add too: two native 32-bit atomics, the low word's carry
// going into the high word (a 64-bit atomic add on shared memory is a compare-and-swap loop).
__device__ __forceinline__ void add_tally(uint64_t* sum, uint64_t tally) {
  static_assert(sizeof(uint64_t) == 2 * sizeof(unsigned));
  unsigned* words = reinterpret_cast<unsigned*>(sum);  // little-endian: the low word first
  const unsigned low = static_cast<unsigned>(tally);
  unsigned high = static_cast<unsigned>(tally >> 32);
  if (low != 0) {
    const unsigned old = atomicAdd(&words[0], low);
    high += old + low < old ? 1u : 0u;
  }
  if (high != 0) atomicAdd(&words[1], high);
}

// The block's reduction of v by `op`, returned to every thread.
template <typename T, typename Op>
__device__ T block_reduce(T v, Shared& sh, Op op) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  T* scratch = reinterpret_cast<T*>(sh.scratch);
  for (int offset = 16; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();  // scratch may still be read by a previous call
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T out = scratch[0];
  for (int w = 1; w < kWarps; ++w)
    out = op(out, scratch[w]);
  return out;
}

template <typename T>
__device__ T block_sum(T v, Shared& sh) {
  return block_reduce(v, sh, [](T a, T b) { return a + b; });
}

// The cluster's sums of the slices' histograms (in sh.slice.histogram) into count[] and weight[]
// (the counts only when `count` is not null), with the slices' counts (sh.slice_count) and largest
// keys (sh.slice_key) summed and reduced into *count_sum and *key_max when asked. Every thread of
// every CTA of the cluster calls it. Each CTA sums a share of the bins over the slices, then
// fetches the other shares from their CTAs; those are read until the next call's first barrier.
__device__ PAGODA_SAMPLING_CALL void merge_slices(int* count, uint64_t* weight, Shared& sh,
                                                  int* count_sum, uint64_t* key_max) {
  cluster_sync();  // every slice is written
  const int t = threadIdx.x;
  const unsigned size = cluster_size();
  const int share = (kBins + size - 1) / size;
  const int mine = static_cast<int>(cluster_rank()) * share + t;
  if (t < share && mine < kBins) {
    int c = 0;
    uint64_t w = 0;
    // Partly unrolled, so that reads of several peers are in flight together.
#ifdef __CUDACC__
#pragma unroll 4
#endif
    for (unsigned r = 0; r < size; ++r) {
      const Shared* peer = cluster_peer(&sh, r);
      if (count != nullptr) c += peer->slice.histogram.count[mine];
      w += peer->slice.histogram.weight[mine];
    }
    if (count != nullptr) count[mine] = c;
    weight[mine] = w;
  }
  // The slices' scalars, a lane each, reduced by every warp.
  const Shared* slice = lane_peer(sh);
  int scalar_sum = slice != nullptr ? slice->slice_count : 0;
  uint64_t scalar_max = slice != nullptr ? slice->slice_key : 0;
  for (int offset = 16; offset > 0; offset /= 2) {
    scalar_sum += __shfl_xor_sync(0xffffffffu, scalar_sum, offset);
    const uint64_t other = __shfl_xor_sync(0xffffffffu, scalar_max, offset);
    scalar_max = other > scalar_max ? other : scalar_max;
  }
  cluster_sync();  // every share is summed, and no slice is read any more
  const unsigned owner = static_cast<unsigned>(t / share);
  if (owner != cluster_rank()) {
    if (count != nullptr) count[t] = peer_member(sh, count, owner)[t];
    weight[t] = peer_member(sh, weight, owner)[t];
  }
  if (count_sum != nullptr) *count_sum = scalar_sum;
  if (key_max != nullptr) *key_max = scalar_max;
  __syncthreads();
}

// This CTA's slice histogram, cleared; the caller fills it after its own barrier.
__device__ inline void clear_slice(Shared& sh) {
  __syncthreads();  // the slice may still be read by this CTA
  sh.slice.histogram.count[threadIdx.x] = 0;
  sh.slice.histogram.weight[threadIdx.x] = 0;
  __syncthreads();
}

// The first thread t at which base + Σ_{s ≤ t} v_s passes `target` (reaches it when `inclusive`),
// with Σ_{s < t} v_s in *below; kThreads and the block's sum when none does.
__device__ inline int first_passing(uint64_t v, uint64_t base, double target, bool inclusive,
                                    Shared& sh, uint64_t* below) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  uint64_t inclusive_sum = v;
  for (int offset = 1; offset < 32; offset *= 2) {
    const uint64_t other = __shfl_up_sync(0xffffffffu, inclusive_sum, offset);
    if (lane >= offset) inclusive_sum += other;
  }
  uint64_t* totals = sh.scratch;
  __syncthreads();  // the scratch may still be read by a previous call
  if (lane == 31) totals[warp] = inclusive_sum;
  if (threadIdx.x == 0) sh.first = kThreads;
  __syncthreads();
  uint64_t earlier = 0, total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) earlier += totals[w];
    total += totals[w];
  }
  const uint64_t before = earlier + inclusive_sum - v;
  const double running = static_cast<double>(base + before + v);
  const unsigned hits =
      __ballot_sync(0xffffffffu, inclusive ? running >= target : running > target);
  if (hits != 0 && lane == 0) atomicMin(&sh.first, threadIdx.x + __ffs(hits) - 1);
  __syncthreads();
  const int first = sh.first;
  if (static_cast<int>(threadIdx.x) == first) sh.below = before;
  __syncthreads();
  *below = first < kThreads ? sh.below : total;
  return first;
}

// A row of logits at a temperature: the weights sample_token() gives its tokens (up to rounding),
// in f32 and as fixed-point tallies, and the row's bins.
struct RowView {
  const float* logits;
  int vocab;
  float max;
  float inverse_temperature;
  float scale;  // bins per unit of (max - logit)
  float fixed;  // a weight of 1 as a tally: 2^(63 - bit width of vocab), so no sum overflows

  __device__ float weight(float logit) const { return expf((logit - max) * inverse_temperature); }
  __device__ uint64_t tally(double weight) const { return __double2ull_rz(weight * fixed); }
  // The same for an f32 weight, without f64 arithmetic: `fixed` is a power of two, so the product
  // is exact in f32 too.
  __device__ uint64_t tally(float weight) const { return __float2ull_rz(weight * fixed); }
  __device__ double untally(uint64_t tally) const { return static_cast<double>(tally) / fixed; }
  // Larger logits in lower bins; impossible tokens (and NaN) in the last.
  __device__ int bin(float logit) const {
    if (!(logit > -INFINITY)) return kBins - 1;
    const float at = (max - logit) * scale;
    return at < kBins - 2 ? static_cast<int>(at) : kBins - 2;
  }
};

// One pass over a row: its argmax and the log-sum-exp of its raw logits, and the view of it at a
// temperature.
struct RowStats {
  Best best;
  RowView view;
};

__device__ PAGODA_SAMPLING_CALL RowStats row_stats(const float* logits, int vocab,
                                                   double temperature, Shared& sh) {
  Best best{-FLT_MAX, INT_MAX, 0.0f};
  float lowest = INFINITY;  // the smallest possible logit
  for_each_logit(logits, vocab, [&](int i, float logit) {
    if (i >= vocab) return;
    best = better(best, Best{logit, i, 1.0f});
    if (logit > -INFINITY) lowest = fminf(lowest, logit);
  });
  // The warps' in one warp, then the slices' in one warp: the same order in every CTA of the
  // cluster, so that each reaches the same sum.
  const int lane = threadIdx.x % 32;
  best = warp_best(best);
  lowest = warp_lowest(lowest);
  __syncthreads();  // bests may still be read by a previous call
  if (lane == 0) {
    sh.bests[threadIdx.x / 32] = best;
    sh.lowests[threadIdx.x / 32] = lowest;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    best = warp_best(sh.bests[lane]);
    lowest = warp_lowest(sh.lowests[lane]);
    if (lane == 0) {
      sh.slice_best = best;
      sh.slice_lowest = lowest;
    }
  }
  cluster_sync();
  if (threadIdx.x < 32) {
    const Shared* slice = lane_peer(sh);
    best = warp_best(slice != nullptr ? slice->slice_best : Best{-FLT_MAX, INT_MAX, 0.0f});
    lowest = warp_lowest(slice != nullptr ? slice->slice_lowest : INFINITY);
    if (lane == 0) {
      sh.bests[0] = best;
      sh.lowests[0] = lowest;
    }
  }
  cluster_sync();  // every peer has read this CTA's values before they are written again
  best = sh.bests[0];
  lowest = sh.lowests[0];
  if (best.index >= vocab) best.index = 0;  // no logit above -FLT_MAX: the host's pick
  const float span = best.value - lowest;
  float scale = span > 0.0f ? (kBins - 2) / span : 0.0f;
  if (!(scale <= FLT_MAX)) scale = 0.0f;
  const float fixed = ldexpf(1.0f, __clzll(static_cast<long long>(vocab)) - 1);  // 2^(63 - bits)
  return {best,
          {logits, vocab, best.value,
           temperature > 0.0 ? static_cast<float>(1.0 / temperature) : 0.0f, scale, fixed}};
}

// Sets of up to this many tokens are sorted by counting, larger ones by a bitonic network.
constexpr int kCountingSortMax = 512;

// sh.keys[0, n) (distinct keys) in ascending order. A small set takes each key to its place, the
// number of smaller keys, behind two barriers; a bitonic network takes a barrier per stage (36 for
// 256 keys), each about 0.2 us on a CTA of 1024 threads.
__device__ inline void sort_keys(int n, Shared& sh) {
  const int t = threadIdx.x;
  if (n <= kCountingSortMax) {
    uint64_t key = 0;
    int place = 0;
    if (t < n) {
      key = sh.keys[t];
      for (int j = 0; j < n; ++j)
        place += sh.keys[j] < key ? 1 : 0;
    }
    __syncthreads();  // every key is read
    if (t < n) sh.keys[place] = key;
    __syncthreads();
    return;
  }
  const int width = 1 << (32 - __clz(n - 1));
  if (t >= n && t < width) sh.keys[t] = ~uint64_t{0};
  __syncthreads();
  for (int k = 2; k <= width; k *= 2) {
    for (int j = k / 2; j > 0; j /= 2) {
      const int partner = t ^ j;
      if (t < width && partner > t) {
        const uint64_t a = sh.keys[t];
        const uint64_t b = sh.keys[partner];
        if ((a > b) == ((t & k) == 0)) {
          sh.keys[t] = b;
          sh.keys[partner] = a;
        }
      }
      __syncthreads();
    }
  }
}

// What a running tally counts: tokens, their weight, or a residual's weight (in place of theirs).
enum class Tally { kCount, kWeight, kResidual };

// Where a running tally over the sorted row passes a target: the token there (~0 when the tally
// never does) and the weight (or residual weight) of the tokens before it.
struct Crossing {
  uint64_t key;
  uint64_t before;
};

// The crossing of `target` by the running tally over the row's sorted tokens. The histogram of the
// first level is the row's (kCount, kWeight) or already in the digit arrays (kResidual, whose
// `residual(logit, id)` gives each token's residual tally). With `gather_head`, every token of the
// bins up to the crossing's is gathered and sorted when they fit on chip, not only the crossing's
// bin: that head of the row's order then answers the row's later crossings (a top-p cut after a
// top-k one, the draw after both) by a scan, without another pass over the row.
template <Tally kTally, typename Residual>
__device__ PAGODA_SAMPLING_CALL Crossing select(const RowView& row, double target, bool inclusive,
                                                bool gather_head, Shared& sh, Residual&& residual) {
  const int t = threadIdx.x;
  const auto tally = [&](float logit, int id) -> uint64_t {
    if constexpr (kTally == Tally::kResidual) return residual(logit, id);
    return row.tally(row.weight(logit));
  };
  uint64_t count_before = 0, weight_before = 0;
  // The entry of counts/weights (a thread each) where the tally passes the target; the counts and
  // weights before it join the tallies before.
  const auto place = [&](uint64_t count, uint64_t weight) {
    uint64_t below;
    if constexpr (kTally == Tally::kCount) {
      const int at = first_passing(count, count_before, target, inclusive, sh, &below);
      count_before += below;
      weight_before += block_sum(t < at ? weight : uint64_t{0}, sh);
      return at;
    } else {
      const int at = first_passing(weight, weight_before, target, inclusive, sh, &below);
      weight_before += below;
      return at;
    }
  };
  // The crossing's index in the sorted set in sh.keys, from the tallies before the set; the set's
  // size when its tokens do not reach the target.
  const auto scan_sorted = [&]() {
    const int n = sh.sorted_count;
    const uint64_t key = t < n ? sh.keys[t] : ~uint64_t{0};
    const uint64_t weight = t < n ? tally(logit_of(key), id_of(key)) : 0;
    const int at = place(t < n ? 1 : 0, weight);
    return at < n ? at : n;
  };
  // The head of this row's order, sorted by an earlier crossing, holds this one if the tally
  // passes the target among its tokens.
  if (sh.sorted.logits == row.logits && sh.sorted.is_head()) {
    const int at = scan_sorted();
    if (at < sh.sorted_count) return {sh.keys[at], weight_before};
    count_before = weight_before = 0;
  }
  const bool row_bins = kTally != Tally::kResidual;
  const int* counts = row_bins ? sh.bin_count : sh.digit_count;
  Set set{row.logits, 0, 0, 0, 0};
  set.bin = place(counts[t], row_bins ? sh.bin_weight[t] : sh.digit_weight[t]);
  if (set.bin == kThreads) return {~uint64_t{0}, weight_before};
  set.first_bin = set.bin;
  int size = counts[set.bin];
  if (gather_head) {
    // The tokens of the bins before the crossing's (a kCount crossing has counted them).
    const uint64_t ahead = kTally == Tally::kCount
                               ? count_before
                               : block_sum(t < set.bin ? uint64_t(counts[t]) : uint64_t{0}, sh);
    if (ahead + size <= kCandidates) {
      set.first_bin = 0;
      size += static_cast<int>(ahead);
      count_before = weight_before = 0;
    }
  }
  // Narrow a set too large to sort on chip by the digits of its keys.
  while (size > kCandidates && set.level < 64 / kDigitBits) {
    clear_slice(sh);  // after every thread has read `size`
    for_each_logit(row.logits, row.vocab, [&](int i, float logit) {
      if (i >= row.vocab || row.bin(logit) != set.bin) return;
      const uint64_t key = sort_key(logit, i);
      if (!set.holds(key)) return;
      const int d = set.digit(key);
      atomicAdd(&sh.slice.histogram.count[d], 1);
      add_tally(&sh.slice.histogram.weight[d], tally(logit, i));
    });
    merge_slices(sh.digit_count, sh.digit_weight, sh, nullptr, nullptr);
    const int d = place(sh.digit_count[t], sh.digit_weight[t]);
    if (d == kThreads) return {~uint64_t{0}, weight_before};
    size = sh.digit_count[d];
    set.prefix = (set.prefix << kDigitBits) | d;
    ++set.level;
  }
  // Gather the set's tokens and sort them, unless they are the set sorted last.
  if (!(set == sh.sorted)) {
    __syncthreads();  // every thread has read sh.sorted
    if (t == 0) sh.gathered = 0;
    __syncthreads();
    const int lane = t % 32;
    for_each_logit(row.logits, row.vocab, [&](int i, float logit) {
      bool member = i < row.vocab && set.holds_bin(row.bin(logit));
      const uint64_t key = member ? sort_key(logit, i) : 0;
      member = member && set.holds(key);
      // A warp's members take consecutive slots: one atomic a warp.
      const unsigned members = __ballot_sync(0xffffffffu, member);
      if (members == 0) return;
      const int leader = __ffs(members) - 1;
      int first = 0;
      if (lane == leader) first = atomicAdd(&sh.gathered, __popc(members));
      first = __shfl_sync(0xffffffffu, first, leader);
      const int slot = first + __popc(members & ((1u << lane) - 1));
      if (member && slot < kCandidates) sh.slice.keys[slot] = key;
    });
    __syncthreads();
    // The slices' tokens side by side, in rank order.
    if (t == 0) sh.slice_count = sh.gathered < kCandidates ? sh.gathered : kCandidates;
    cluster_sync();
    // Each warp reads the slices' counts a lane each and scans them; each thread then copies the
    // one token that falls to it, if any.
    const unsigned size = cluster_size();
    const Shared* slice = lane_peer(sh);
    const int count = slice != nullptr ? slice->slice_count : 0;
    int end = count;  // of this lane's rank's tokens, among the slices' side by side
    for (int offset = 1; offset < 32; offset *= 2) {
      const int earlier = __shfl_up_sync(0xffffffffu, end, offset);
      if (lane >= offset) end += earlier;
    }
    int n = 0;
    for (unsigned r = 0; r < size; ++r) {
      const int rank_end = __shfl_sync(0xffffffffu, end, static_cast<int>(r));
      const int rank_begin = rank_end - __shfl_sync(0xffffffffu, count, static_cast<int>(r));
      if (t >= rank_begin && t < rank_end) {
        sh.keys[t] = cluster_peer(&sh, r)->slice.keys[t - rank_begin];
      }
      n = rank_end < kCandidates ? rank_end : kCandidates;
    }
    cluster_sync();  // every peer has read this CTA's tokens before they are written again
    sort_keys(n, sh);
    if (t == 0) {
      sh.sorted = set;
      sh.sorted_count = n;
    }
    __syncthreads();
  }
  const int at = scan_sorted();
  return {at < sh.sorted_count ? sh.keys[at] : ~uint64_t{0}, weight_before};
}

// Tokens and weights of the row per bin, and how many tokens are at least min_p times as likely
// as the most likely (whose weight is 1). Also the last token in sorted order.
struct RowHistogram {
  int likely;
  uint64_t total;  // the row's weight, as a tally
  uint64_t last;
};

__device__ PAGODA_SAMPLING_CALL RowHistogram histogram(const RowView& row, double min_p,
                                                       Shared& sh) {
  const int t = threadIdx.x;
  clear_slice(sh);
  int likely = 0;
  uint64_t last = 0;
  for_each_logit(row.logits, row.vocab, [&](int i, float logit) {
    const bool real = i < row.vocab;
    const int b = row.bin(logit);
    // Impossible tokens (weight 0) would all meet at one bin: a warp counts them at once.
    const unsigned impossible = __ballot_sync(0xffffffffu, real && b == kBins - 1);
    if (impossible != 0 && t % 32 == __ffs(impossible) - 1)
      atomicAdd(&sh.slice.histogram.count[kBins - 1], __popc(impossible));
    if (!real) return;
    const uint64_t key = sort_key(logit, i);
    last = key > last ? key : last;
    const float weight = row.weight(logit);
    likely += weight >= min_p;
    if (b == kBins - 1) return;
    atomicAdd(&sh.slice.histogram.count[b], 1);
    add_tally(&sh.slice.histogram.weight[b], row.tally(weight));
  });
  likely = block_sum(likely, sh);
  last = block_reduce(last, sh, [](uint64_t a, uint64_t b) { return a > b ? a : b; });
  if (t == 0) {
    sh.slice_count = likely;
    sh.slice_key = last;
  }
  merge_slices(sh.bin_count, sh.bin_weight, sh, &likely, &last);
  return {likely, block_sum(sh.bin_weight[t], sh), last};
}

// A row after temperature, min-p, top-k and top-p: the tokens sorting up to `last` stay, holding
// `mass` of weight (`mass_tally` as a tally).
struct Filtered {
  RowView row;
  uint64_t last;
  uint64_t mass_tally;
  double mass;

  __device__ bool keeps(float logit, int id) const { return sort_key(logit, id) <= last; }
  // The filtered probability of token `id`, whose logit is `logit`.
  __device__ double probability(float logit, int id) const {
    return keeps(logit, id) ? row.weight(logit) / mass : 0.0;
  }
  // The token the draw `uniform` falls on, walking the kept tokens in order (the last kept one
  // when rounding leaves the draw past them all).
  __device__ int draw(double uniform, Shared& sh) const {
    const auto none = [](float, int) { return uint64_t{0}; };
    const Crossing at = select<Tally::kWeight>(row, uniform * static_cast<double>(mass_tally),
                                               false, false, sh, none);
    return id_of(at.key <= last ? at.key : last);
  }
};

// `row` filtered by `params`, as filter_distribution() does. Leaves the row's histogram in `sh`.
__device__ inline Filtered filter_row(const RowView& row, const SamplingRow& params, Shared& sh) {
  const RowHistogram h = histogram(row, params.min_p, sh);
  int64_t keep = row.vocab;
  if (params.min_p > 0.0) keep = h.likely > 0 ? h.likely : 1;
  if (params.top_k > 0 && params.top_k < keep) keep = params.top_k;
  uint64_t last = h.last;
  uint64_t mass = h.total;
  const auto none = [](float, int) { return uint64_t{0}; };
  const auto through = [&](const Crossing& at) {
    return at.before + row.tally(row.weight(logit_of(at.key)));
  };
  if (keep < row.vocab) {
    const Crossing at = select<Tally::kCount>(row, static_cast<double>(keep), true, true, sh, none);
    if (at.key < last) {
      last = at.key;
      mass = through(at);
    }
  }
  if (params.top_p < 1.0) {
    const Crossing at =
        select<Tally::kWeight>(row, params.top_p * static_cast<double>(mass), true, true, sh, none);
    if (at.key < last) {
      last = at.key;
      mass = through(at);
    }
  }
  return {row, last, mass, row.untally(mass)};
}

// The token that replaces a rejected draft: a draw from max(0, p - q) normalised, over p's kept
// tokens in p's order; p itself where q covers p everywhere (as draw_residual() on the host).
__device__ inline int draw_residual(const Filtered& p, const Filtered& q, const float* q_logits,
                                    double uniform, Shared& sh) {
  const RowView& row = p.row;
  const auto residual = [&](float logit, int id) -> uint64_t {
    if (!p.keeps(logit, id)) return 0;
    return row.tally(fmax(0.0, row.weight(logit) / p.mass - q.probability(q_logits[id], id)));
  };
  // The residual's weight per bin of p's row (whose tokens per bin are p's histogram's), its
  // total, and its last token.
  const int t = threadIdx.x;
  clear_slice(sh);
  uint64_t last = 0;
  for_each_logit(row.logits, row.vocab, [&](int i, float logit) {
    if (i >= row.vocab) return;
    const uint64_t r = residual(logit, i);
    if (r == 0) return;
    const uint64_t key = sort_key(logit, i);
    last = key > last ? key : last;
    add_tally(&sh.slice.histogram.weight[row.bin(logit)], r);
  });
  last = block_reduce(last, sh, [](uint64_t a, uint64_t b) { return a > b ? a : b; });
  if (t == 0) {
    sh.slice_count = 0;
    sh.slice_key = last;
  }
  merge_slices(nullptr, sh.digit_weight, sh, nullptr, &last);
  sh.digit_count[t] = sh.bin_count[t];  // p's tokens per bin
  __syncthreads();
  const uint64_t total = block_sum(sh.digit_weight[t], sh);
  if (total == 0) return p.draw(uniform, sh);
  const Crossing at = select<Tally::kResidual>(row, uniform * static_cast<double>(total), false,
                                               false, sh, residual);
  return id_of(at.key <= last ? at.key : last);
}

// Row `row_index` of logits [rows, vocab] sampled with rows[row_index] (greedy when rows is
// null) by a cluster of CTAs of kThreads threads (one CTA, or several sharing the row): the token
// to out_ids, its log-probability under the raw logits to out_logprobs and, for a row judging a
// draft, whether it keeps it to out_kept. draft_logits [drafts, vocab] holds the drafter's rows
// that sampling rows judge against.
__device__ inline void sample_row(unsigned row_index, const float* logits, int vocab,
                                  const SamplingRow* rows, const float* draft_logits,
                                  int32_t* out_ids, float* out_logprobs, int32_t* out_kept,
                                  Shared& sh) {
  if (threadIdx.x == 0) sh.sorted = Set{nullptr, -1, -1, 0, 0};
  const SamplingRow params = rows != nullptr ? rows[row_index] : SamplingRow{};
  const float* row = logits + static_cast<int64_t>(row_index) * vocab;

  // The argmax, and the log-sum-exp of the raw logits for the token's log-probability, in one
  // pass over the row.
  const RowStats stats = row_stats(row, vocab, params.temperature, sh);
  const float log_total = stats.best.value + logf(stats.best.sum);

  // A greedy row keeps its draft when it is the argmax, and gives the argmax either way.
  int token = stats.best.index;
  bool keeps = params.draft >= 0 && token == params.draft;
  if (params.temperature > 0.0) {
    if (params.draft < 0) {
      token = filter_row(stats.view, params, sh).draw(params.uniform, sh);
    } else {
      // The lossless rule: keep the draft with probability min(1, p/q), else draw from the
      // residual. q first, so p's histogram stays for a draw from p.
      const float* q_logits = draft_logits + params.draft_row * vocab;
      const Filtered q =
          filter_row(row_stats(q_logits, vocab, params.temperature, sh).view, params, sh);
      const Filtered p = filter_row(stats.view, params, sh);
      const double p_draft = p.probability(row[params.draft], params.draft);
      const double q_draft = q.probability(q_logits[params.draft], params.draft);
      keeps = q_draft > 0.0 && params.judge * q_draft < p_draft;
      token = keeps ? params.draft : draw_residual(p, q, q_logits, params.uniform, sh);
    }
  }
  if (threadIdx.x == 0 && cluster_rank() == 0) {
    out_ids[row_index] = token;
    out_logprobs[row_index] = row[token] - log_total;
    if (out_kept != nullptr) out_kept[row_index] = keeps ? 1 : 0;
  }
  // No CTA leaves while its peers may still read the shares of its last merge.
  if (cluster_size() > 1) cluster_sync();
}

}  // namespace pagoda::cuda::sampling
