// Sampling on the device, so a step copies two numbers per row to the host instead of the whole
// vocabulary. Greedy rows take the argmax. The other rows follow sample_token() on the host step
// for step, in double as it does: the logits are sorted (most likely first, ties by the lower id,
// one stable device-wide radix sort over all rows), and one CTA per row then finds the min-p,
// top-k and top-p cuts and the draw on the sorted row by prefix sums. A row that judges a draft
// (speculative decoding) applies the lossless rule of accept_drafts() the same way, with the
// drafter's rows sorted beside the target's: each row judges its own draft, and the host keeps
// the drafts up to the first row that rejects.
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <climits>
#include <cstring>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

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

__device__ __forceinline__ Best warp_best(Best best) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset),
                     __shfl_xor_sync(0xffffffffu, best.index, offset),
                     __shfl_xor_sync(0xffffffffu, best.sum, offset)};
    best = better(best, other);
  }
  return best;
}

// Radix-sort keys: ascending keys put a row's larger logits first, and rows in order.
__device__ __forceinline__ uint32_t descending_bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return ~ascending;
}

__device__ __forceinline__ float value_of(uint64_t key) {
  const uint32_t ascending = ~static_cast<uint32_t>(key);
  return __uint_as_float((ascending & 0x80000000u) ? ascending & 0x7fffffffu : ~ascending);
}

__global__ void make_keys_kernel(const float* logits, int64_t vocab, int64_t count,
                                 int64_t first_row, uint64_t* keys, int32_t* ids) {
  start_after_prior_kernels();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    keys[i] = (static_cast<uint64_t>(first_row + i / vocab) << 32) | descending_bits(logits[i]);
    ids[i] = static_cast<int32_t>(i % vocab);
  }
}

// The sorted row's probabilities as sample_token() computes them, with the exponentials in f32
// and the sums in double.
struct SortedRow {
  const uint64_t* keys;
  float max;  // the row's largest logit
  float inverse_temperature;
  double total;  // Σ exp((logit - max) / temperature)

  __device__ float weight_of(float logit) const {
    return expf((logit - max) * inverse_temperature);
  }
  __device__ float weight(int64_t j) const { return weight_of(value_of(keys[j])); }
  __device__ double probability(int64_t j) const { return weight(j) / total; }
};

// The block's reduction of v by `op`, returned to every thread. `scratch` holds kWarps values.
template <typename T, typename Op>
__device__ T block_reduce(T v, T* scratch, Op op) {
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
__device__ T block_sum(T v, T* scratch) {
  return block_reduce(v, scratch, [](T a, T b) { return a + b; });
}

// The first j < n at which the running sum of value(j) from 0 passes `target` (reaches it when
// `inclusive`); n when none does. Each warp takes a contiguous run of the row: the warps' sums
// place the crossing, and the warp that holds it walks its run 32 tokens at a time.
template <typename Value>
__device__ int64_t first_crossing(Value value, int64_t n, double target, bool inclusive,
                                  double* scratch, unsigned long long* found) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t run = (n + kWarps - 1) / kWarps;
  const int64_t begin = warp * run < n ? warp * run : n;
  const int64_t end = begin + run < n ? begin + run : n;
  double sum = 0.0;
  for (int64_t j = begin + lane; j < end; j += 32)
    sum += value(j);
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = sum;
  if (threadIdx.x == 0) *found = static_cast<unsigned long long>(n);
  __syncthreads();
  double running = 0.0;
  for (int w = 0; w < warp; ++w)
    running += scratch[w];
  auto passes = [&](double v) { return inclusive ? v >= target : v > target; };
  if (begin < end && passes(running + sum)) {
    for (int64_t base = begin; base < end; base += 32) {
      const int64_t j = base + lane;
      double p = j < end ? value(j) : 0.0;
      for (int offset = 1; offset < 32; offset *= 2) {
        const double other = __shfl_up_sync(0xffffffffu, p, offset);
        if (lane >= offset) p += other;
      }
      const unsigned hits = __ballot_sync(0xffffffffu, j < end && passes(running + p));
      if (hits != 0) {
        if (lane == 0) atomicMin(found, static_cast<unsigned long long>(base + __ffs(hits) - 1));
        break;
      }
      running += __shfl_sync(0xffffffffu, p, 31);
    }
  }
  __syncthreads();
  return static_cast<int64_t>(*found);
}

// A sorted row after temperature, min-p, top-k and top-p: its first `keep` tokens stay, holding
// `mass` of the probability.
struct Filtered {
  SortedRow sorted;
  int64_t keep;
  double mass;
  uint32_t last_bits;  // the sort key and id of the last token kept
  int32_t last_id;

  // The token the draw `uniform` falls on, walking the kept tokens in order.
  __device__ int64_t draw(double uniform, double* scratch, unsigned long long* found) const {
    const int64_t j = first_crossing([&](int64_t i) { return sorted.probability(i); }, keep,
                                     uniform * mass, false, scratch, found);
    return j < keep ? j : keep - 1;
  }
  // The filtered probability of `token`, whose logit is `logit`: 0 unless it sorts no later than
  // the last token kept.
  __device__ double probability(int32_t token, float logit) const {
    const uint32_t bits = descending_bits(logit);
    const bool kept = bits < last_bits || (bits == last_bits && token <= last_id);
    return kept ? sorted.weight_of(logit) / sorted.total / mass : 0.0;
  }
};

// Row `keys`/`ids` (vocab sorted entries) filtered by `params`, as filter_distribution() does.
__device__ Filtered filter_row(const uint64_t* keys, const int32_t* ids, int64_t vocab,
                               const SamplingRow& params, double* scratch,
                               unsigned long long* found) {
  SortedRow sorted{keys, value_of(keys[0]), static_cast<float>(1.0 / params.temperature), 1.0};
  // The total weight, and how many tokens are at least min_p times as likely as the first (whose
  // weight is 1): a prefix of the sorted row.
  double total = 0.0;
  int64_t likely = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
    const float weight = sorted.weight(j);
    total += weight;
    likely += weight >= params.min_p;
  }
  sorted.total = block_sum(total, scratch);
  likely = block_sum(likely, reinterpret_cast<int64_t*>(scratch));
  int64_t keep = vocab;
  if (params.min_p > 0.0) keep = likely > 0 ? likely : 1;
  if (params.top_k > 0 && params.top_k < keep) keep = params.top_k;
  if (params.top_p < 1.0) {
    double mass = 0.0;
    for (int64_t j = threadIdx.x; j < keep; j += kThreads)
      mass += sorted.probability(j);
    mass = block_sum(mass, scratch);
    const int64_t cut = first_crossing([&](int64_t j) { return sorted.probability(j); }, keep,
                                       params.top_p * mass, true, scratch, found);
    keep = cut < keep ? cut + 1 : keep;
  }
  double mass = 0.0;
  for (int64_t j = threadIdx.x; j < keep; j += kThreads)
    mass += sorted.probability(j);
  mass = block_sum(mass, scratch);
  return {sorted, keep, mass, static_cast<uint32_t>(keys[keep - 1]), ids[keep - 1]};
}

// The token that replaces a rejected draft: a draw from max(0, p - q) normalised, over p's kept
// tokens in p's order; p itself where q covers p everywhere (as draw_residual() on the host).
__device__ int64_t draw_residual(const Filtered& p, const int32_t* p_ids, const Filtered& q,
                                 const float* q_logits, double uniform, double* scratch,
                                 unsigned long long* found) {
  const auto residual = [&](int64_t j) {
    const int32_t token = p_ids[j];
    return fmax(0.0, p.sorted.probability(j) / p.mass - q.probability(token, q_logits[token]));
  };
  double total = 0.0;
  int64_t last = 0;  // the last position with residual mass, for a draw that rounding overshoots
  for (int64_t j = threadIdx.x; j < p.keep; j += kThreads) {
    const double r = residual(j);
    total += r;
    if (r > 0.0) last = j;
  }
  total = block_sum(total, scratch);
  last = block_reduce(last, reinterpret_cast<int64_t*>(scratch),
                      [](int64_t a, int64_t b) { return a > b ? a : b; });
  if (total <= 0.0) return p.draw(uniform, scratch, found);
  const int64_t j = first_crossing(residual, p.keep, uniform * total, false, scratch, found);
  return j < p.keep ? j : last;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int64_t vocab, const SamplingRow* rows,
                  const uint64_t* sorted_keys, const int32_t* sorted_ids, const float* draft_logits,
                  int64_t draft_sorted_row, int32_t* out_ids, float* out_logprobs,
                  int32_t* out_kept) {
  start_after_prior_kernels();
  __shared__ Best warp_bests[kWarps];
  __shared__ double scratch[kWarps];
  __shared__ unsigned long long found;
  const SamplingRow params = rows != nullptr ? rows[blockIdx.x] : SamplingRow{};
  const float* row = logits + blockIdx.x * vocab;

  // The argmax, and the log-sum-exp of the raw logits for the sampled token's log-probability, in
  // one pass over the row.
  Best best{-FLT_MAX, INT_MAX, 0.0f};
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    best = better(best, Best{row[i], static_cast<int>(i), 1.0f});
  best = warp_best(best);
  if (threadIdx.x % 32 == 0) warp_bests[threadIdx.x / 32] = best;
  __syncthreads();
  best = warp_bests[0];
  for (int w = 1; w < kWarps; ++w)
    best = better(best, warp_bests[w]);
  const float log_total = best.value + logf(best.sum);

  // A greedy row keeps its draft when it is the argmax, and gives the argmax either way.
  int64_t token = best.index;
  bool keeps = params.draft >= 0 && token == params.draft;
  if (params.temperature > 0.0) {
    const int64_t base = blockIdx.x * vocab;
    const Filtered p =
        filter_row(sorted_keys + base, sorted_ids + base, vocab, params, scratch, &found);
    if (params.draft < 0) {
      token = sorted_ids[base + p.draw(params.uniform, scratch, &found)];
    } else {
      // The lossless rule: keep the draft with probability min(1, p/q), else draw from the
      // residual.
      const int64_t q_base = (draft_sorted_row + params.draft_row) * vocab;
      const float* q_logits = draft_logits + params.draft_row * vocab;
      const Filtered q =
          filter_row(sorted_keys + q_base, sorted_ids + q_base, vocab, params, scratch, &found);
      const double p_draft = p.probability(params.draft, row[params.draft]);
      const double q_draft = q.probability(params.draft, q_logits[params.draft]);
      keeps = q_draft > 0.0 && params.judge * q_draft < p_draft;
      token = keeps ? params.draft
                    : sorted_ids[base + draw_residual(p, sorted_ids + base, q, q_logits,
                                                      params.uniform, scratch, &found)];
    }
  }
  if (threadIdx.x == 0) {
    out_ids[blockIdx.x] = static_cast<int32_t>(token);
    out_logprobs[blockIdx.x] = row[token] - log_total;
    if (out_kept != nullptr) out_kept[blockIdx.x] = keeps ? 1 : 0;
  }
}

}  // namespace

void sample(const Tensor& logits, std::span<const SamplingRow> rows, const Tensor& ids,
            const Tensor& logprobs, const Tensor& kept, const Tensor& draft_logits) {
  PAGODA_CHECK(logits.dim() == 2 && logits.dtype() == DType::kF32 && logits.is_contiguous() &&
                   !logits.device().is_cpu(),
               "sampling needs contiguous [rows, vocab] f32 logits on a GPU; got {}",
               logits.shape());
  const int64_t count = logits.size(0);
  const int64_t vocab = logits.size(1);
  PAGODA_CHECK(static_cast<int64_t>(rows.size()) == count && ids.dtype() == DType::kI32 &&
                   ids.numel() == count && ids.is_contiguous() && logprobs.dtype() == DType::kF32 &&
                   logprobs.numel() == count && logprobs.is_contiguous(),
               "sampling {} rows: parameters and outputs must have a row each", count);
  const Device device = logits.device();
  bool any_random = false, any_draft = false;
  int64_t drafts = 0;  // rows of draft_logits that sampling rows judge against
  for (const SamplingRow& row : rows) {
    any_random = any_random || row.temperature > 0.0;
    if (row.draft < 0) continue;
    any_draft = true;
    PAGODA_CHECK(row.draft < vocab, "a draft {} outside the vocabulary of {}", row.draft, vocab);
    if (row.temperature > 0.0) {
      PAGODA_CHECK(draft_logits.defined() && draft_logits.dim() == 2 &&
                       draft_logits.size(1) == vocab && draft_logits.dtype() == DType::kF32 &&
                       draft_logits.is_contiguous() && draft_logits.device() == device &&
                       row.draft_row >= 0 && row.draft_row < draft_logits.size(0),
                   "a sampling row judging a draft needs its drafter's row {} of contiguous "
                   "[drafts, {}] f32 logits on the device",
                   row.draft_row, vocab);
      drafts = draft_logits.size(0);
    }
  }
  PAGODA_CHECK(!any_draft || (kept.defined() && kept.dtype() == DType::kI32 &&
                              kept.numel() == count && kept.is_contiguous()),
               "sampling {} rows that judge drafts needs a kept flag per row", count);
  PAGODA_CHECK(vocab > 0 && vocab < INT_MAX && count + drafts < (int64_t{1} << 31) &&
                   (count + drafts) * vocab < (int64_t{1} << 31),
               "sampling {} rows of {} logits", count + drafts, vocab);
  if (count == 0) return;
  // All-greedy steps without drafts need neither parameters on the device nor sorted rows.
  Tensor params, sorted_keys, sorted_ids;
  if (any_random || any_draft) {
    params = Tensor::empty({count * static_cast<int64_t>(sizeof(SamplingRow))}, DType::kU8);
    std::memcpy(params.raw_data(), rows.data(), rows.size_bytes());
    params = params.to(device);
  }
  if (any_random) {
    // Keys (row, descending logit) sort stably, so equal logits keep the lower id first. The
    // drafter's rows sort after the target's.
    const int64_t items = (count + drafts) * vocab;
    const Tensor keys = Tensor::uninitialized({items}, DType::kI64, device);
    const Tensor order = Tensor::uninitialized({items}, DType::kI32, device);
    sorted_keys = Tensor::uninitialized({items}, DType::kI64, device);
    sorted_ids = Tensor::uninitialized({items}, DType::kI32, device);
    auto make_keys = [&](const Tensor& source, int64_t first_row) {
      const int64_t n = source.numel();
      const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
      launch(make_keys_kernel, blocks, 256, 0, stream(), source.data<float>(), vocab, n, first_row,
             reinterpret_cast<uint64_t*>(keys.raw_data()) + first_row * vocab,
             order.data<int32_t>() + first_row * vocab);
    };
    make_keys(logits, 0);
    if (drafts > 0) make_keys(draft_logits, count);
    const int end_bit = 32 + std::bit_width(static_cast<uint64_t>(count + drafts - 1));
    auto sort = [&](void* temp, size_t& temp_bytes) {
      PAGODA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
          temp, temp_bytes, reinterpret_cast<const uint64_t*>(keys.raw_data()),
          reinterpret_cast<uint64_t*>(sorted_keys.raw_data()), order.data<int32_t>(),
          sorted_ids.data<int32_t>(), static_cast<int>(items), 0, end_bit, stream()));
    };
    size_t temp_bytes = 0;
    sort(nullptr, temp_bytes);
    const Tensor temp =
        Tensor::uninitialized({static_cast<int64_t>(temp_bytes) + 1}, DType::kU8, device);
    sort(temp.raw_data(), temp_bytes);
  }
  launch(sample_kernel, static_cast<unsigned>(count), kThreads, 0, stream(), logits.data<float>(),
         vocab,
         params.defined() ? reinterpret_cast<const SamplingRow*>(params.raw_data()) : nullptr,
         any_random ? reinterpret_cast<const uint64_t*>(sorted_keys.raw_data()) : nullptr,
         any_random ? sorted_ids.data<int32_t>() : nullptr,
         drafts > 0 ? draft_logits.data<float>() : nullptr, count, ids.data<int32_t>(),
         logprobs.data<float>(), any_draft ? kept.data<int32_t>() : nullptr);
}

}  // namespace pagoda::cuda
