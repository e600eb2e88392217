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
#include "core/cuda/tensor_core.cuh"
#include "ops/cuda/elementwise_common.cuh"
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

// What the kernel writes of output (m, row) from its sum: act(sum) · up[m, row], the sum first
// rounded to bf16 as a separate activation would read it. (Sum and PairedBy: gemv_common.cuh.)
template <Activation kActivation>
struct GatedBy {
  static constexpr bool kPaired = false;
  const bf16* up;
  int64_t up_stride;
  __device__ __forceinline__ float operator()(float sum, int m, int row) const {
    const float gate = __bfloat162float(__float2bfloat16(sum));
    return elementwise::activate<kActivation>(gate) * __bfloat162float(up[m * up_stride + row]);
  }
};

// Splitting K puts four times the warps, and loads, in flight on each multiprocessor for a short
// matrix. The weight does not depend on earlier kernels, so each warp loads its first step before
// waiting for them.
template <int kM, typename Out, typename Epilogue>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const bf16* x, int64_t x_stride, const bf16* weight, int64_t w_stride, Out* out,
                int n, int k, Epilogue epilogue) {
  static_assert(kWarpsPerBlock % kSplits == 0);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int part = warp % kSplits;
  constexpr bool kPaired = Epilogue::kPaired;
  const int first_row =
      group_first_output<kPaired>(blockIdx.x * (kWarpsPerBlock / kSplits) + warp / kSplits);
  const int pieces = k / 8;
  const int part_pieces = (pieces + kSplits * 32 - 1) / (kSplits * 32) * 32;
  const int begin = part * part_pieces;
  const int end = min(pieces, begin + part_pieces);
  const uint4* w_rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = weight_row<kPaired>(first_row, r, n);
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
  reduce_and_store<kM>(acc, first_row, n, active, out, epilogue);
}

// The tensor-core form, for up to 8 rows of x: m16n8k16 bf16 products (f32 accumulate) with 8
// weight rows as the columns of B and x's rows as the rows of A (A's rows 8-15 are zero). Lane
// (g, t) loads 16 bytes of weight row g at piece 4q + t of quad q (4 pieces, 32 columns), and the
// same piece of x's row g: as they are, they are the B and A fragments of two products, since a
// product may sum its 16 slots in any order as long as A and B map them alike (slots 2t, 2t + 1,
// 2t + 8, 2t + 9 <-> columns 0-3 of the piece, then 4-7). kMmaSplits warps share 8 weight rows,
// each a contiguous part of the quads with kMmaUnroll quads in flight per lane; their sums meet in
// shared memory. One load instruction reads 64 bytes of each of 8 rows, half a 128-byte line: the
// L2::128B hint has L2 fetch the whole line from memory at once, which took gate_up and the
// lm_head from 88% of copy bandwidth to 98-106% (Llama-3-8B shape, 1-8 rows). The row count is an
// argument rather than a template parameter: a kernel specialised for 2 rows was scheduled with
// fewer loads in flight and ran at 55-63% of copy on qkv, o_proj and down where the others ran at
// 77-91%.
constexpr int kMmaWarps = 8;
constexpr int kMmaSplits = 4;
constexpr int kMmaUnroll = 4;
constexpr int kMmaRowsPerBlock = 8 * kMmaWarps / kMmaSplits;

template <typename Out>
__global__ void __launch_bounds__(kMmaWarps * 32)
    mma_gemv_kernel(const bf16* x, int64_t x_stride, int m, const bf16* weight, int64_t w_stride,
                    Out* out, int n, int k) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int part = warp % kMmaSplits;
  const int row0 = (blockIdx.x * (kMmaWarps / kMmaSplits) + warp / kMmaSplits) * 8;
  const int pieces = k / 8;
  const int quads = (pieces + 3) / 4;
  const int part_quads = (quads + kMmaSplits - 1) / kMmaSplits;
  const int begin = part * part_quads;
  const int end = min(quads, begin + part_quads);
  const uint4* w_row = reinterpret_cast<const uint4*>(
                           weight + static_cast<int64_t>(min(row0 + g, n - 1)) * w_stride) +
                       t;
  const uint4* x_row = reinterpret_cast<const uint4*>(x + min(g, m - 1) * x_stride) + t;
  uint4 w[kMmaUnroll];
  const auto load = [&](int first) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int piece = (first + u) * 4;
      w[u] = first + u < end && piece + t < pieces ? load_streaming_line(w_row + piece)
                                                   : make_uint4(0, 0, 0, 0);
    }
  };
  load(begin);
  start_after_prior_kernels();
  float c0[4] = {};
  float c1[4] = {};
  for (int first = begin; first < end; first += kMmaUnroll) {
    if (first != begin) load(first);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int piece = (first + u) * 4;
      uint4 xv = make_uint4(0, 0, 0, 0);
      if (g < m && first + u < end && piece + t < pieces) xv = x_row[piece];
      const uint32_t a0[4] = {xv.x, 0u, xv.y, 0u};
      const uint32_t a1[4] = {xv.z, 0u, xv.w, 0u};
      mma<bf16>(c0, a0, w[u].x, w[u].y);
      mma<bf16>(c1, a1, w[u].z, w[u].w);
    }
  }
  // Elements 0 and 1 of c: x's row g against weight rows row0 + 2t and row0 + 2t + 1.
  __shared__ float partial[kMmaWarps][32][2];
  partial[warp][lane][0] = c0[0] + c1[0];
  partial[warp][lane][1] = c0[1] + c1[1];
  __syncthreads();
  if (part != 0 || g >= m) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float v = 0.0f;
#pragma unroll
    for (int p = 0; p < kMmaSplits; ++p)
      v += partial[warp + p][lane][i];
    const int row = row0 + 2 * t + i;
    if (row < n) {
      if constexpr (sizeof(Out) == 4) {
        out[g * n + row] = v;
      } else {
        out[g * n + row] = __float2bfloat16(v);
      }
    }
  }
}

// Launches gemv_kernel for out's n = out.size(1) outputs (the weight has 2n rows with a paired
// epilogue, n otherwise).
template <int kM, typename Epilogue>
void launch_gemv(const Tensor& x, const Tensor& weight, const Tensor& out, Epilogue epilogue) {
  const int n = static_cast<int>(out.size(1));
  const int k = static_cast<int>(weight.size(1));
  const int outputs_per_block = Epilogue::kPaired ? kRowsPerBlock / 2 : kRowsPerBlock;
  const int blocks = (n + outputs_per_block - 1) / outputs_per_block;
  const auto* xp = reinterpret_cast<const bf16*>(x.raw_data());
  const auto* wp = reinterpret_cast<const bf16*>(weight.raw_data());
  with_output(out, [&]<typename Out>(Out* o) {
    if constexpr (Epilogue::kPaired && sizeof(Out) == 4) {
      fail("a paired epilogue writes bf16");
    } else {
      launch(gemv_kernel<kM, Out, Epilogue>, blocks, kWarpsPerBlock * 32, 0, stream(), xp,
             x.stride(0), wp, weight.stride(0), o, n, k, epilogue);
    }
  });
}

bool aligned_rows(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 &&
         (t.size(0) == 1 || t.stride(0) % 8 == 0) && t.stride(1) == 1;
}

// Both kernels read bf16 x and weight in 16-byte pieces and write out [M, N] whole, bf16 or f32.
// Anything else goes to cuBLASLt's path, which names what it refuses.
bool few_rows_apply(const Tensor& x, const Tensor& weight, const Tensor& out, int64_t max_rows) {
  return x.dim() == 2 && weight.dim() == 2 && out.dim() == 2 && x.dtype() == DType::kBF16 &&
         weight.dtype() == DType::kBF16 &&
         (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32) && x.size(0) >= 1 &&
         x.size(0) <= max_rows && x.size(1) == weight.size(1) && x.size(1) % 8 == 0 &&
         out.size(0) == x.size(0) && out.size(1) == weight.size(0) && aligned_rows(x) &&
         aligned_rows(weight) && out.is_contiguous() && weight.size(0) < (int64_t{1} << 31);
}

}  // namespace

bool gemv_applies(const Tensor& x, const Tensor& weight, const Tensor& out) {
  return few_rows_apply(x, weight, out, kMaxGemvRows);
}

void gemv(const Tensor& x, const Tensor& weight, const Tensor& out) {
  PAGODA_CHECK(gemv_applies(x, weight, out), "gemv of x {} and weight {}", x.shape(),
               weight.shape());
  with_rows<kMaxGemvRows>(x.size(0), [&]<int kM>() { launch_gemv<kM>(x, weight, out, Sum{}); });
}

void gated_gemv(const Tensor& x, const Tensor& weight, Activation activation, const Tensor& up,
                const Tensor& out) {
  PAGODA_CHECK(gemv_applies(x, weight, out) && out.dtype() == DType::kBF16 &&
                   up.dtype() == DType::kBF16 && up.dim() == 2 && up.shape() == out.shape() &&
                   up.stride(1) == 1,
               "gated gemv of x {} and weight {} by up {} {} into {} {}", x.shape(), weight.shape(),
               up.shape(), dtype_name(up.dtype()), out.shape(), dtype_name(out.dtype()));
  const auto* u = reinterpret_cast<const bf16*>(up.raw_data());
  with_rows<kMaxGemvRows>(x.size(0), [&]<int kM>() {
    if (activation == Activation::kSilu) {
      launch_gemv<kM>(x, weight, out, GatedBy<Activation::kSilu>{u, up.stride(0)});
    } else {
      launch_gemv<kM>(x, weight, out, GatedBy<Activation::kGeluTanh>{u, up.stride(0)});
    }
  });
}

bool paired_gemv_applies(const Tensor& x, const Tensor& gate_up, const Tensor& out) {
  return gate_up.dim() == 2 && gate_up.size(0) % 2 == 0 && gate_up.size(0) < (int64_t{1} << 31) &&
         out.dtype() == DType::kBF16 &&
         few_rows_apply(x, gate_up.narrow(0, 0, gate_up.size(0) / 2), out, kMaxGemvRows);
}

void paired_gemv(const Tensor& x, const Tensor& gate_up, Activation activation, const Tensor& out) {
  PAGODA_CHECK(paired_gemv_applies(x, gate_up, out), "paired gemv of x {} and weight {} into {}",
               x.shape(), gate_up.shape(), out.shape());
  with_rows<kMaxGemvRows>(x.size(0), [&]<int kM>() {
    if (activation == Activation::kSilu) {
      launch_gemv<kM>(x, gate_up, out, PairedBy<Activation::kSilu>{});
    } else {
      launch_gemv<kM>(x, gate_up, out, PairedBy<Activation::kGeluTanh>{});
    }
  });
}

bool mma_gemv_applies(const Tensor& x, const Tensor& weight, const Tensor& out) {
  return few_rows_apply(x, weight, out, kMaxMmaGemvRows);
}

void mma_gemv(const Tensor& x, const Tensor& weight, const Tensor& out) {
  PAGODA_CHECK(mma_gemv_applies(x, weight, out), "tensor-core gemv of x {} and weight {}",
               x.shape(), weight.shape());
  const int m = static_cast<int>(x.size(0));
  const int n = static_cast<int>(weight.size(0));
  const int k = static_cast<int>(weight.size(1));
  const int blocks = (n + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock;
  const auto* xp = reinterpret_cast<const bf16*>(x.raw_data());
  const auto* wp = reinterpret_cast<const bf16*>(weight.raw_data());
  with_output(out, [&]<typename Out>(Out* o) {
    launch(mma_gemv_kernel<Out>, blocks, kMmaWarps * 32, 0, stream(), xp, x.stride(0), m, wp,
           weight.stride(0), o, n, k);
  });
}

}  // namespace pagoda::cuda
