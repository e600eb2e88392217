// Matrix-vector products for the few rows of a decode step: out[M, N] = x[M, K] · weight[N, K]ᵀ
// with M <= kMaxGemvRows. The weight streams from memory once, in 16-byte loads: kSplits warps
// share kRowsPerWarp weight rows, each warp a contiguous quarter of K and each lane every 32nd
// piece of 8 elements of it, with the loads of one step all issued before they are used; x's rows
// come through the cache, which every warp shares. Lanes reduce by shuffles, the warps of a row
// through shared memory. Splitting K four ways (against one warp per row pair) took Llama-3-8B's
// batch-1 matrices from 71-81% of copy bandwidth to 82-90% (qkv, o_proj, down) and past 100% (the
// MLP's gate_up and the lm_head).
#include <cuda_bf16.h>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "ops/cuda/gemv_common.cuh"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace gemv_shape;

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const auto* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]);
    const float2 b = __bfloat1622float2(xp[i]);
    sum = fmaf(a.x, b.x, sum);
    sum = fmaf(a.y, b.y, sum);
  }
  return sum;
}

// The weight pieces of one step of a lane: kUnroll pieces (32 apart) of each of its rows, zero
// from `end` (the end of the lane's part of the row) on.
__device__ __forceinline__ void load_step(const uint4* const (&rows)[kRowsPerWarp], int base,
                                          int end, uint4 (&w)[kRowsPerWarp][kUnroll]) {
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int piece = base + u * 32;
      w[r][u] = piece < end ? load_streaming(rows[r] + piece) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Splitting K puts four times the warps, and loads, in flight on each multiprocessor for a short
// matrix. The weight does not depend on earlier kernels, so each warp loads its first step before
// waiting for them.
template <int kM, typename Out>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const bf16* x, int64_t x_stride, const bf16* weight, int64_t w_stride, Out* out,
                int n, int k) {
  static_assert(kWarpsPerBlock % kSplits == 0);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int part = warp % kSplits;
  const int first_row = (blockIdx.x * (kWarpsPerBlock / kSplits) + warp / kSplits) * kRowsPerWarp;
  const int pieces = k / 8;
  const int part_pieces = (pieces + kSplits * 32 - 1) / (kSplits * 32) * 32;
  const int begin = part * part_pieces;
  const int end = min(pieces, begin + part_pieces);
  const uint4* w_rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = min(first_row + r, n - 1);  // a missing last row re-reads a real one
    w_rows[r] = reinterpret_cast<const uint4*>(weight + row * w_stride);
  }
  constexpr int kStep = 32 * kUnroll;
  const bool active = first_row < n;
  uint4 w[kRowsPerWarp][kUnroll];
  if (active) load_step(w_rows, begin + lane, end, w);
  start_after_prior_kernels();
  float acc[kRowsPerWarp][kM] = {};
  for (int base = begin + lane; active && base < end; base += kStep) {
    if (base != begin + lane) load_step(w_rows, base, end, w);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int piece = base + u * 32;
      if (piece >= end) break;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x + m * x_stride + piece * 8);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
          acc[r][m] += dot8(w[r][u], xv);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      for (int offset = 16; offset > 0; offset /= 2)
        acc[r][m] += __shfl_xor_sync(0xffffffffu, acc[r][m], offset);
    }
  }
  __shared__ float partial[kWarpsPerBlock][kRowsPerWarp][kM];
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int m = 0; m < kM; ++m)
        partial[warp][r][m] = acc[r][m];
    }
  }
  __syncthreads();
  if (part != 0 || lane != 0 || !active) return;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float v = acc[r][m];
      for (int p = 1; p < kSplits; ++p)
        v += partial[warp + p][r][m];
      if (first_row + r < n) {
        if constexpr (sizeof(Out) == 4) {
          out[m * n + first_row + r] = v;
        } else {
          out[m * n + first_row + r] = __float2bfloat16(v);
        }
      }
    }
  }
}

template <int kM>
void launch_gemv(const Tensor& x, const Tensor& weight, const Tensor& out) {
  const int n = static_cast<int>(weight.size(0));
  const int k = static_cast<int>(weight.size(1));
  const int blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  const auto* xp = reinterpret_cast<const bf16*>(x.raw_data());
  const auto* wp = reinterpret_cast<const bf16*>(weight.raw_data());
  if (out.dtype() == DType::kF32) {
    launch(gemv_kernel<kM, float>, blocks, kWarpsPerBlock * 32, 0, stream(), xp, x.stride(0), wp,
           weight.stride(0), out.data<float>(), n, k);
  } else {
    launch(gemv_kernel<kM, bf16>, blocks, kWarpsPerBlock * 32, 0, stream(), xp, x.stride(0), wp,
           weight.stride(0), reinterpret_cast<bf16*>(out.raw_data()), n, k);
  }
}

bool aligned_rows(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 &&
         (t.size(0) == 1 || t.stride(0) % 8 == 0) && t.stride(1) == 1;
}

}  // namespace

bool gemv_applies(const Tensor& x, const Tensor& weight, const Tensor& out) {
  return x.size(0) >= 1 && x.size(0) <= kMaxGemvRows && x.size(1) % 8 == 0 && aligned_rows(x) &&
         aligned_rows(weight) && out.is_contiguous() && weight.size(0) < (int64_t{1} << 31);
}

void gemv(const Tensor& x, const Tensor& weight, const Tensor& out) {
  PAGODA_CHECK(gemv_applies(x, weight, out), "gemv of x {} and weight {}", x.shape(),
               weight.shape());
  with_rows<kMaxGemvRows>(x.size(0), [&]<int kM>() { launch_gemv<kM>(x, weight, out); });
}

}  // namespace pagoda::cuda
