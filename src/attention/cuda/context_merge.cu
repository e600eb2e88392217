#include <cuda_bf16.h>

#include "attention/cuda/context_merge.h"
#include "core/cuda/context.h"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxRanks = 256;

// One CTA per (token, output head): the shares' weights once, then each thread a slice of Dv.
// parts: [R, T, H, Dv] bf16; lses: [R, T, H] f32; out: [T, H_out, Dv] bf16.
__global__ void merge_parts_kernel(const __nv_bfloat16* __restrict__ parts,
                                   const float* __restrict__ lses, __nv_bfloat16* __restrict__ out,
                                   int ranks, int tokens, int heads, int dim, int out_heads,
                                   int head_begin) {
  const int t = blockIdx.x / out_heads;
  const int h = blockIdx.x % out_heads;
  const int head = head_begin + h;
  __shared__ float weights[kMaxRanks];
  if (threadIdx.x == 0) {
    float max = -INFINITY;
    for (int r = 0; r < ranks; ++r)
      max = fmaxf(max, lses[(static_cast<int64_t>(r) * tokens + t) * heads + head]);
    float sum = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      const float l = lses[(static_cast<int64_t>(r) * tokens + t) * heads + head];
      weights[r] = isinf(max) ? 0.0f : __expf(l - max);
      sum += weights[r];
    }
    const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int r = 0; r < ranks; ++r)
      weights[r] *= inverse;
  }
  __syncthreads();
  __nv_bfloat16* dst = out + (static_cast<int64_t>(t) * out_heads + h) * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < ranks; ++r) {
      acc += weights[r] *
             __bfloat162float(
                 parts[((static_cast<int64_t>(r) * tokens + t) * heads + head) * dim + d]);
    }
    dst[d] = __float2bfloat16_rn(acc);
  }
}

}  // namespace

void merge_attention_parts(const Tensor& parts, const Tensor& lses, int64_t head_begin,
                           const Tensor& out) {
  PAGODA_CHECK(parts.dtype() == DType::kBF16, "device parts must be bf16, not {}",
               dtype_name(parts.dtype()));
  const int64_t ranks = parts.size(0);
  const int64_t tokens = parts.size(1);
  const int64_t out_heads = out.size(1);
  PAGODA_CHECK(ranks >= 1 && ranks <= kMaxRanks, "{} ranks to merge; at most {}", ranks, kMaxRanks);
  PAGODA_CHECK(tokens * out_heads < (int64_t{1} << 31), "{} rows of {} heads to merge", tokens,
               out_heads);
  if (tokens == 0 || out_heads == 0) return;
  merge_parts_kernel<<<static_cast<unsigned>(tokens * out_heads), kThreads, 0, stream()>>>(
      parts.data<__nv_bfloat16>(), lses.data<float>(), out.data<__nv_bfloat16>(),
      static_cast<int>(ranks), static_cast<int>(tokens), static_cast<int>(parts.size(2)),
      static_cast<int>(parts.size(3)), static_cast<int>(out_heads), static_cast<int>(head_begin));
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
