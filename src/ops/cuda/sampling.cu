// Greedy sampling on the device: each row's argmax and its log-probability, so a greedy step
// copies two numbers per row to the host instead of the whole vocabulary.
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>

#include "core/cuda/context.h"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 1024;

struct Best {
  float value;
  int index;
};

// The larger value; on a tie the lower index, as the host sampler chooses.
__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// One CTA per row: the argmax, then log-sum-exp relative to the maximum.
__global__ void argmax_logprob_kernel(const float* logits, int64_t vocab, int64_t row_stride,
                                      int32_t* ids, float* logprobs) {
  const float* row = logits + blockIdx.x * row_stride;
  __shared__ Best warp_best[kThreads / 32];
  __shared__ float warp_sum[kThreads / 32];
  __shared__ Best row_best;
  Best best{-FLT_MAX, INT_MAX};
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    best = better(best, Best{row[i], static_cast<int>(i)});
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_xor_sync(0xffffffffu, best.value, offset),
                     __shfl_xor_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best all = warp_best[0];
    for (int w = 1; w < kThreads / 32; ++w)
      all = better(all, warp_best[w]);
    row_best = all;
  }
  __syncthreads();
  const float max = row_best.value;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    sum += expf(row[i] - max);
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w)
      total += warp_sum[w];
    ids[blockIdx.x] = row_best.index;
    logprobs[blockIdx.x] = -logf(total);  // max - (max + log(total))
  }
}

}  // namespace

void argmax_logprob(const Tensor& logits, const Tensor& ids, const Tensor& logprobs) {
  PAGODA_CHECK(logits.dim() == 2 && logits.dtype() == DType::kF32 && logits.stride(1) == 1,
               "argmax of logits {} needs [rows, vocab] f32 rows", logits.shape());
  const int64_t rows = logits.size(0);
  PAGODA_CHECK(ids.dtype() == DType::kI32 && ids.numel() == rows && ids.is_contiguous() &&
                   logprobs.dtype() == DType::kF32 && logprobs.numel() == rows &&
                   logprobs.is_contiguous(),
               "argmax outputs");
  if (rows == 0) return;
  argmax_logprob_kernel<<<rows, kThreads, 0, stream()>>>(logits.data<float>(), logits.size(1),
                                                         logits.stride(0), ids.data<int32_t>(),
                                                         logprobs.data<float>());
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
