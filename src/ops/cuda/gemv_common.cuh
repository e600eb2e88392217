// What the matrix-vector kernels (gemv.cu for bf16 weights, fp8_linear.cu for FP8 ones) share:
// their launch shape, streaming weight loads, the reduction of each row's split sums, their
// epilogues, and the dispatch on the number of rows of x and on the output's dtype.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/cuda/elementwise_common.cuh"

namespace pagoda::cuda::gemv_shape {

constexpr int kWarpsPerBlock = 8;
constexpr int kRowsPerWarp = 2;
constexpr int kUnroll = 4;  // pieces per lane per row in flight
constexpr int kSplits = 4;  // warps sharing a pair of rows
constexpr int kRowsPerBlock = kWarpsPerBlock / kSplits * kRowsPerWarp;

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The same for a load that reads only part of a 128-byte line of each row (64 bytes of 8 rows, in
// the tensor-core kernels): the L2::128B hint has L2 fetch the whole line from memory at once.
__device__ __forceinline__ uint4 load_streaming_line(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// What a matrix-vector kernel writes from its sums. Sum: out[m, row] = the row's sum. PairedBy:
// the two weight rows of a warp group are row j of a gate and row j of an up projection stacked
// below it ([gate; up], 2n rows), and out[m, j] = act(gate) · up, each sum rounded to bf16 first
// as a separate product would write it and a separate gated activation read it.
struct Sum {
  static constexpr bool kPaired = false;
  __device__ __forceinline__ float operator()(float sum, int, int) const { return sum; }
};

template <Activation kActivation>
struct PairedBy {
  static constexpr bool kPaired = true;
  __device__ __forceinline__ float operator()(float gate, float up) const {
    const float g = __bfloat162float(__float2bfloat16(gate));
    return elementwise::activate<kActivation>(g) * __bfloat162float(__float2bfloat16(up));
  }
};

// The first output of a warp group (the index of output row j for a paired epilogue, of its
// first of kRowsPerWarp rows otherwise), and the weight row its sums r read, of n outputs.
template <bool kPaired>
__device__ __forceinline__ int group_first_output(int group) {
  return kPaired ? group : group * kRowsPerWarp;
}
template <bool kPaired>
__device__ __forceinline__ int weight_row(int first, int r, int n) {
  // A missing last row re-reads a real one.
  return kPaired ? min(first, n - 1) + r * n : min(first + r, n - 1);
}

// A paired epilogue's store, by the lane that holds warp `warp`'s sums: out[m * n + j] from the
// gate's and the up projection's sums, each added over the kSplits warps as a plain store adds.
template <int kM, typename Out, typename Epilogue>
__device__ __forceinline__ void store_paired(
    const float (&acc)[kRowsPerWarp][kM], const float (&partial)[kWarpsPerBlock][kRowsPerWarp][kM],
    int warp, int j, int n, Out* out, const Epilogue& epilogue) {
  static_assert(kRowsPerWarp == 2 && sizeof(Out) == 2, "a gate and an up row, into bf16");
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float v[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      v[r] = acc[r][m];
      for (int p = 1; p < kSplits; ++p)
        v[r] += partial[warp + p][r][m];
    }
    out[m * n + j] = __float2bfloat16(epilogue(v[0], v[1]));
  }
}

// Sums each (row, x row) accumulator over the lanes and over the kSplits warps that share the
// rows, and writes out[m * n + first_row + r] (f32 or bf16) as `epilogue` says. Every thread of
// the block calls it.
template <int kM, typename Out, typename Epilogue>
__device__ __forceinline__ void reduce_and_store(float (&acc)[kRowsPerWarp][kM], int first_row,
                                                 int n, bool active, Out* out,
                                                 const Epilogue& epilogue) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
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
  if (warp % kSplits != 0 || lane != 0 || !active) return;
  if constexpr (Epilogue::kPaired) {
    store_paired<kM>(acc, partial, warp, first_row, n, out, epilogue);
  } else {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        float v = acc[r][m];
        for (int p = 1; p < kSplits; ++p)
          v += partial[warp + p][r][m];
        if (first_row + r < n) {
          v = epilogue(v, m, first_row + r);
          if constexpr (sizeof(Out) == 4) {
            out[m * n + first_row + r] = v;
          } else {
            out[m * n + first_row + r] = __float2bfloat16(v);
          }
        }
      }
    }
  }
}

// body(out's data as float* or __nv_bfloat16*, as its dtype says): the kernels' Out type.
template <typename Body>
void with_output(const Tensor& out, Body&& body) {
  if (out.dtype() == DType::kF32) return body(out.data<float>());
  body(reinterpret_cast<__nv_bfloat16*>(out.raw_data()));
}

// launch.template operator()<m>() for 1 <= m <= kMax.
template <int kMax, typename Launch>
void with_rows(int64_t m, Launch&& launch) {
  if constexpr (kMax >= 1) {
    if (m == kMax) return launch.template operator()<kMax>();
    with_rows<kMax - 1>(m, launch);
  }
}

}  // namespace pagoda::cuda::gemv_shape
