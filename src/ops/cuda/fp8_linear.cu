// linear() with an FP8 (e4m3) weight and its block scales, three ways:
// - fp8_gemv, up to kMaxFp8GemvRows rows of x: a matrix-vector kernel shaped like the bf16 one
//   (gemv.cu). Each 16-byte load brings 16 weights of one row, which are widened in registers
//   (once, for every row of x), dotted with x's 16 bf16 values and scaled by their block's scale,
//   so the weight streams from memory once at one byte an element.
// - fp8_gemm, for a weight in 128 x 128 blocks: x is quantized to e4m3 per row and group of 128
//   columns, and cuBLASLt's FP8 tensor-core GEMM applies both operands' scales.
// - fp8_dequantized_linear, for any other weight: the weight is dequantized into a bf16 scratch
//   matrix for cuBLASLt.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "core/cuda/tensor_core.cuh"
#include "core/fast_divisor.h"
#include "ops/cuda/gemv_common.cuh"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

using bf16 = __nv_bfloat16;
using namespace gemv_shape;

constexpr int kPiece = 16;  // weights per 16-byte load

// Four e4m3 weights (one 32-bit word) as floats: e4m3 pairs to f16 pairs, then f32, both exact.
// (Building bf16 pairs with integer instructions instead, and widening them by shifts, measured
// 5-15% slower at one row of x.)
__device__ __forceinline__ void widen4(uint32_t word, float (&out)[4]) {
  const __half2_raw lo =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word & 0xffffu), __NV_E4M3);
  const __half2_raw hi =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo));
  const float2 b = __half22float2(__half2(hi));
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
}

// The 16 e4m3 weights of a 16-byte load as floats.
__device__ __forceinline__ void widen16(const uint4& w, float (&out)[kPiece]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v[4];
    widen4(words[i], v);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      out[4 * i + j] = v[j];
  }
}

// 16 bf16 values of x (two 16-byte pieces) as floats.
__device__ __forceinline__ void widen_x(const bf16* x, float (&out)[kPiece]) {
  const uint4 lo = *reinterpret_cast<const uint4*>(x);
  const uint4 hi = *reinterpret_cast<const uint4*>(x + 8);
  const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

struct Fp8Args {
  const bf16* x;
  int64_t x_stride;
  const uint8_t* weight;
  int64_t w_stride;
  const float* scales;  // [ceil(n / block_rows), scale_cols]
  int scale_cols;
  FastDivisor block_rows;
  FastDivisor block_pieces;  // block_cols / kPiece: a piece's scale column (an integer division
                             // per piece would cost a fifth of the kernel's instructions)
  FastDivisor block_steps;   // block_cols / kStepCols (the tensor-core GEMV's steps), or 1
  int n;
  int k;
};

// Pieces in flight per lane and weight row, and CTAs per multiprocessor the registers must allow.
// At one row of x, two pieces and four CTAs (56 registers, 32 warps a multiprocessor) streamed
// Llama-3-8B's four projections 6-20% faster than four pieces and the 80 registers (three CTAs)
// the compiler chose unbounded, and took its batch-1 step 4.5% below five CTAs' (48 registers);
// more rows of x keep the bf16 GEMV's shape.
template <int kM>
constexpr int kFp8Unroll = kM == 1 ? 2 : kUnroll;
template <int kM>
constexpr int kFp8MinBlocks = kM == 1 ? 4 : 1;

// args.n is out's row length: the outputs, each from a weight row or, with a paired epilogue, from
// a gate row and the up row args.n below it.
template <int kM, typename Out, typename Epilogue>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kFp8MinBlocks<kM>)
    fp8_gemv_kernel(Fp8Args args, Out* out, Epilogue epilogue) {
  constexpr bool kPaired = Epilogue::kPaired;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int part = warp % kSplits;
  const int first_row =
      group_first_output<kPaired>(blockIdx.x * (kWarpsPerBlock / kSplits) + warp / kSplits);
  const int pieces = args.k / kPiece;
  const int part_pieces = (pieces + kSplits * 32 - 1) / (kSplits * 32) * 32;
  const int begin = part * part_pieces;
  const int end = min(pieces, begin + part_pieces);
  const uint4* w_rows[kRowsPerWarp];
  const float* s_rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = weight_row<kPaired>(first_row, r, args.n);
    w_rows[r] = reinterpret_cast<const uint4*>(args.weight + row * args.w_stride);
    s_rows[r] = args.scales + static_cast<int64_t>(args.block_rows.divide(row)) * args.scale_cols;
  }
  const bool active = first_row < args.n;
  uint4 w[kRowsPerWarp][kFp8Unroll<kM>];
  const auto load_step = [&](int base) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int u = 0; u < kFp8Unroll<kM>; ++u) {
        const int piece = base + u * 32;
        w[r][u] = piece < end ? load_streaming(w_rows[r] + piece) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  if (active) load_step(begin + lane);
  start_after_prior_kernels();
  float acc[kRowsPerWarp][kM] = {};
  for (int base = begin + lane; active && base < end; base += 32 * kFp8Unroll<kM>) {
    if (base != begin + lane) load_step(base);
#pragma unroll
    for (int u = 0; u < kFp8Unroll<kM>; ++u) {
      const int piece = base + u * 32;
      if (piece >= end) break;
      const int column_block = args.block_pieces.divide(piece);
      // Each row's 16 weights widened once, for every row of x.
      float wf[kRowsPerWarp][kPiece];
      float scale[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        scale[r] = __ldg(s_rows[r] + column_block);
        widen16(w[r][u], wf[r]);
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        float xf[kPiece];
        widen_x(args.x + m * args.x_stride + piece * kPiece, xf);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          float dot = 0.0f;
#pragma unroll
          for (int j = 0; j < kPiece; ++j)
            dot = fmaf(wf[r][j], xf[j], dot);
          acc[r][m] = fmaf(dot, scale[r], acc[r][m]);
        }
      }
    }
  }
  reduce_and_store<kM>(acc, first_row, args.n, active, out, epilogue);
}

// The tensor-core GEMV: out[m, row] for the 16 weight rows [16 * blockIdx.x, + 16) and up to 8
// rows of x, as m16n8k16 f16 products (f32 accumulate) with the weight rows as A and x's rows as
// the 8 columns of B. Each lane (g, t) loads 16 e4m3 weights of rows g and g + 8 at columns
// [64 s + 16 t, + 16) of a step s, widens them a pair at a time (one cvt per pair) into four A
// fragments, and takes x's row g at the same 16 columns as B: a product sums over its 16 slots in
// any order, so the slots may map to columns however is cheapest, as long as A and B agree (slot
// 2t + e <-> column 16t + 4j + e, slot 2t + 8 + e <-> 16t + 4j + 2 + e, for product j of the step).
// A step lies in one block of scales (block_rows % 16 == 0, block_cols % 64 == 0), whose scale
// multiplies the step's products once. The CTA's warps take every kMmaWarps-th step; their sums
// meet in shared memory. x is rounded to f16 (clamped to +-65504).
// Three steps per warp in flight fit four CTAs a multiprocessor (60-63 registers, no spills) and
// took Llama-3-8B's FP8 batch-4 decode step 0.96x what four steps (74-78 registers, three CTAs)
// took; eight steps measured slower (1.3x at 8 rows).
constexpr int kMmaWarps = 8;
constexpr int kMmaUnroll = 3;
constexpr int kMmaMinBlocks = 4;
constexpr int kStepCols = 64;

template <int kM, typename Out>
__global__ void __launch_bounds__(kMmaWarps * 32, kMmaMinBlocks)
    fp8_mma_gemv_kernel(Fp8Args args, Out* out) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int row0 = static_cast<int>(blockIdx.x) * 16;
  const uint8_t* w_lo =
      args.weight + static_cast<int64_t>(min(row0 + g, args.n - 1)) * args.w_stride + 16 * t;
  const uint8_t* w_hi =
      args.weight + static_cast<int64_t>(min(row0 + g + 8, args.n - 1)) * args.w_stride + 16 * t;
  const float* scale_row =
      args.scales + static_cast<int64_t>(args.block_rows.divide(row0)) * args.scale_cols;
  const bf16* x_row = args.x + min(g, kM - 1) * args.x_stride + 16 * t;
  const int steps = args.k / kStepCols;
  uint4 a[kMmaUnroll][2];
  const auto load = [&](int first) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int step = first + u * kMmaWarps;
      const bool valid = step < steps;
      a[u][0] = valid ? load_streaming_line(reinterpret_cast<const uint4*>(w_lo + step * kStepCols))
                      : make_uint4(0, 0, 0, 0);
      a[u][1] = valid ? load_streaming_line(reinterpret_cast<const uint4*>(w_hi + step * kStepCols))
                      : make_uint4(0, 0, 0, 0);
    }
  };
  load(warp);
  start_after_prior_kernels();
  float acc[4] = {};
  for (int first = warp; first < steps; first += kMmaWarps * kMmaUnroll) {
    if (first != warp) load(first);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      const int step = first + u * kMmaWarps;
      if (step >= steps) break;
      // x's row g at the lane's 16 columns, as f16 pairs (rows past kM are zero).
      uint32_t b[8] = {};
      if (g < kM) {
        const uint4 lo = *reinterpret_cast<const uint4*>(x_row + step * kStepCols);
        const uint4 hi = *reinterpret_cast<const uint4*>(x_row + step * kStepCols + 8);
        const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
          b[i] = bf16x2_to_f16x2(words[i]);
      }
      const uint32_t w0[4] = {a[u][0].x, a[u][0].y, a[u][0].z, a[u][0].w};
      const uint32_t w1[4] = {a[u][1].x, a[u][1].y, a[u][1].z, a[u][1].w};
      float c[4] = {};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t fragment[4] = {e4m3x2_to_f16x2(w0[j]), e4m3x2_to_f16x2(w1[j]),
                                      e4m3x2_to_f16x2(w0[j] >> 16), e4m3x2_to_f16x2(w1[j] >> 16)};
        mma<__half>(c, fragment, b[2 * j], b[2 * j + 1]);
      }
      const float scale = __ldg(scale_row + args.block_steps.divide(step));
#pragma unroll
      for (int i = 0; i < 4; ++i)
        acc[i] = fmaf(c[i], scale, acc[i]);
    }
  }
  // c[0..1]: weight row g, x rows 2t and 2t + 1; c[2..3]: row g + 8.
  __shared__ float partial[kMmaWarps][32][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    partial[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v = acc[i];
    for (int w = 1; w < kMmaWarps; ++w)
      v += partial[w][lane][i];
    const int row = row0 + g + (i / 2) * 8;
    const int m = 2 * t + i % 2;
    if (m < kM && row < args.n) {
      if constexpr (sizeof(Out) == 4) {
        out[m * args.n + row] = v;
      } else {
        out[m * args.n + row] = __float2bfloat16(v);
      }
    }
  }
}

// out[n, k] = bf16(weight[n, k] * its block's scale), 16 weights a thread: row blockIdx.x, pieces
// from blockIdx.y * blockDim.x.
__global__ void dequantize_kernel(Fp8Args args, bf16* out) {
  start_after_prior_kernels();
  const int row = static_cast<int>(blockIdx.x);
  const int piece = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x);
  if (piece >= args.k / kPiece) return;
  const int64_t column = static_cast<int64_t>(piece) * kPiece;
  const uint4 w = *reinterpret_cast<const uint4*>(args.weight + row * args.w_stride + column);
  const float scale =
      args.scales[static_cast<int64_t>(args.block_rows.divide(row)) * args.scale_cols +
                  args.block_pieces.divide(piece)];
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  alignas(16) bf16 values[kPiece];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // widened and scaled a word at a time
    float v[4];
    widen4(words[i], v);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      values[4 * i + j] = __float2bfloat16(v[j] * scale);
  }
  auto* dst = reinterpret_cast<uint4*>(out + row * static_cast<int64_t>(args.k) + column);
  dst[0] = reinterpret_cast<const uint4*>(values)[0];
  dst[1] = reinterpret_cast<const uint4*>(values)[1];
}

// The weight's part of the arguments (x is set by the GEMV).
Fp8Args fp8_args(const Weight& weight) {
  return {
      .x = nullptr,
      .x_stride = 0,
      .weight = reinterpret_cast<const uint8_t*>(weight.values.raw_data()),
      .w_stride = weight.values.stride(0),
      .scales = weight.scales.data<float>(),
      .scale_cols = static_cast<int>(weight.scales.size(1)),
      .block_rows = FastDivisor(static_cast<int>(weight.block_rows)),
      .block_pieces = FastDivisor(static_cast<int>(weight.block_cols / kPiece)),
      .block_steps = FastDivisor(static_cast<int>(std::max<int64_t>(1, weight.block_cols / 64))),
      .n = static_cast<int>(weight.rows()),
      .k = static_cast<int>(weight.cols())};
}

template <int kM>
void launch_fp8_mma_gemv(const Fp8Args& args, const Tensor& out) {
  const int blocks = (args.n + 15) / 16;
  with_output(out, [&]<typename Out>(Out* o) {
    launch(fp8_mma_gemv_kernel<kM, Out>, blocks, kMmaWarps * 32, 0, stream(), args, o);
  });
}

template <int kM, typename Epilogue = Sum>
void launch_fp8_gemv(const Fp8Args& args, const Tensor& out, Epilogue epilogue = {}) {
  const int outputs_per_block = Epilogue::kPaired ? kRowsPerBlock / 2 : kRowsPerBlock;
  const int blocks = (args.n + outputs_per_block - 1) / outputs_per_block;
  with_output(out, [&]<typename Out>(Out* o) {
    if constexpr (Epilogue::kPaired && sizeof(Out) == 4) {
      fail("a paired epilogue writes bf16");
    } else {
      launch(fp8_gemv_kernel<kM, Out, Epilogue>, blocks, kWarpsPerBlock * 32, 0, stream(), args, o,
             epilogue);
    }
  });
}

bool aligned_rows(const Tensor& t, int64_t element_multiple) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 &&
         (t.size(0) == 1 || t.stride(0) % element_multiple == 0) && t.stride(1) == 1;
}

// Columns of x that share one scale for the tensor-core GEMM: the width of cuBLASLt's
// VEC128_32F groups, and of the weight's blocks it pairs with.
constexpr int kGroup = 128;

// Rows of x the tensor-core GEMM is run for: M rounded up to a multiple of this, the extra rows
// zero. (cuBLASLt 13 refuses the FP8 block-scaled GEMM of one row, and took 4, 8, 16 and more.)
constexpr int64_t kRowPad = 4;

// q = x quantized per row and group of kGroup columns: the group's scale is its largest magnitude
// / 448 (0 for an all-zero group) and each value e4m3(x · 448 / largest), rounded to nearest even.
// Rows from `rows` to `padded_rows` are zero. scales is [K / kGroup, padded_rows], a group's rows
// adjacent (cuBLASLt's layout). A warp per (row, group), four columns a lane.
__global__ void quantize_groups_kernel(const bf16* x, int64_t x_stride, int rows, int padded_rows,
                                       int groups, uint8_t* q, float* scales) {
  start_after_prior_kernels();
  const int item = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32);
  if (item >= padded_rows * groups) return;
  const int row = item / groups;
  const int group = item % groups;
  const int64_t column = static_cast<int64_t>(group) * kGroup + threadIdx.x % 32 * 4;
  const uint2 raw =
      row < rows ? *reinterpret_cast<const uint2*>(x + row * x_stride + column) : uint2{0, 0};
  const float v[4] = {__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                      __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u)};
  float largest = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int offset = 16; offset > 0; offset /= 2)
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  const float inverse = largest > 0.0f ? 448.0f / largest : 0.0f;
  const auto pair = [&](int i) {
    return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(
        make_float2(v[i] * inverse, v[i + 1] * inverse), __NV_SATFINITE, __NV_E4M3));
  };
  *reinterpret_cast<uint32_t*>(q + row * static_cast<int64_t>(groups) * kGroup + column) =
      pair(0) | pair(2) << 16;
  if (threadIdx.x % 32 == 0) {
    scales[static_cast<int64_t>(group) * padded_rows + row] = largest / 448.0f;
  }
}

}  // namespace

bool fp8_weight_readable(const Weight& weight) {
  return weight.quantized() && weight.values.dim() == 2 && weight.cols() % kPiece == 0 &&
         weight.block_cols % kPiece == 0 && aligned_rows(weight.values, 16) &&
         weight.rows() < (int64_t{1} << 31) && weight.cols() < (int64_t{1} << 31);
}

void check_fp8_linear(const Tensor& x, const Weight& weight, const Tensor& out) {
  const int64_t m = x.size(0);
  const int64_t n = weight.rows();
  const int64_t k = weight.cols();
  PAGODA_CHECK(weight.quantized() && x.dim() == 2 && out.dim() == 2 && x.size(1) == k &&
                   out.size(0) == m && out.size(1) == n,
               "FP8 linear shapes: x {} · weight {}ᵀ -> out {}", x.shape(), weight.values.shape(),
               out.shape());
  PAGODA_CHECK(x.dtype() == DType::kBF16 && out.is_contiguous() &&
                   (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32),
               "FP8 linear takes bf16 x and writes bf16 or f32; got x {}, out {}",
               dtype_name(x.dtype()), dtype_name(out.dtype()));
  if (!fp8_weight_readable(weight)) {
    fail(
        "FP8 linear needs K and the scale blocks' width to be multiples of 16, and 16-byte "
        "aligned weight rows; got weight {} in blocks of {} x {}",
        weight.values.shape(), weight.block_rows, weight.block_cols);
  }
}

bool fp8_gemv_applies(const Tensor& x) {
  return x.size(0) <= kMaxFp8GemvRows && aligned_rows(x, 8);
}

void fp8_gemv(const Tensor& x, const Weight& weight, const Tensor& out) {
  check_fp8_linear(x, weight, out);
  PAGODA_CHECK(fp8_gemv_applies(x), "FP8 GEMV of x {} (strides {})", x.shape(), x.strides());
  if (x.size(0) == 0 || weight.rows() == 0) return;
  Fp8Args args = fp8_args(weight);
  args.x = reinterpret_cast<const bf16*>(x.raw_data());
  args.x_stride = x.stride(0);
  with_rows<kMaxFp8GemvRows>(x.size(0), [&]<int kM>() { launch_fp8_gemv<kM>(args, out); });
}

void fp8_paired_gemv(const Tensor& x, const Weight& gate_up, Activation activation,
                     const Tensor& out) {
  const int64_t n = gate_up.rows() / 2;
  PAGODA_CHECK(gate_up.rows() % 2 == 0 && out.dim() == 2 && out.size(1) == n &&
                   out.dtype() == DType::kBF16 && fp8_gemv_applies(x),
               "paired FP8 GEMV of x {} and weight {} into {}", x.shape(), gate_up.values.shape(),
               out.shape());
  check_fp8_linear(x, gate_up.narrow_rows(0, n), out);
  Fp8Args args = fp8_args(gate_up);
  args.x = reinterpret_cast<const bf16*>(x.raw_data());
  args.x_stride = x.stride(0);
  args.n = static_cast<int>(n);
  with_rows<kMaxFp8GemvRows>(x.size(0), [&]<int kM>() {
    if (activation == Activation::kSilu) {
      launch_fp8_gemv<kM>(args, out, PairedBy<Activation::kSilu>{});
    } else {
      launch_fp8_gemv<kM>(args, out, PairedBy<Activation::kGeluTanh>{});
    }
  });
}

bool fp8_mma_gemv_applies(const Tensor& x, const Weight& weight) {
  return fp8_gemv_applies(x) && weight.block_rows % 16 == 0 && weight.block_cols % kStepCols == 0 &&
         weight.cols() % kStepCols == 0;
}

void fp8_mma_gemv(const Tensor& x, const Weight& weight, const Tensor& out) {
  check_fp8_linear(x, weight, out);
  PAGODA_CHECK(fp8_mma_gemv_applies(x, weight),
               "FP8 tensor-core GEMV of x {} (strides {}) and weight {} in blocks of {} x {}",
               x.shape(), x.strides(), weight.values.shape(), weight.block_rows, weight.block_cols);
  if (x.size(0) == 0 || weight.rows() == 0) return;
  Fp8Args args = fp8_args(weight);
  args.x = reinterpret_cast<const bf16*>(x.raw_data());
  args.x_stride = x.stride(0);
  with_rows<kMaxFp8GemvRows>(x.size(0), [&]<int kM>() { launch_fp8_mma_gemv<kM>(args, out); });
}

bool fp8_gemm_applies(const Tensor& x, const Weight& weight) {
  // cuBLASLt reads the weight's scale rows at a 16-byte pitch, and writes 16-byte out rows.
  return weight.block_rows == kGroup && weight.block_cols == kGroup &&
         weight.cols() % kGroup == 0 && weight.scales.size(1) % 4 == 0 && weight.rows() % 8 == 0 &&
         aligned_rows(x, 8) && x.size(0) + kRowPad < (int64_t{1} << 31) / (weight.cols() / kGroup);
}

void fp8_gemm(const Tensor& x, const Weight& weight, const Tensor& out) {
  check_fp8_linear(x, weight, out);
  PAGODA_CHECK(fp8_gemm_applies(x, weight),
               "FP8 tensor-core GEMM of x {} and weight {} in blocks of {} x {}", x.shape(),
               weight.values.shape(), weight.block_rows, weight.block_cols);
  const int64_t m = x.size(0);
  const int64_t n = weight.rows();
  const int64_t groups = weight.cols() / kGroup;
  if (m == 0 || n == 0) return;
  const int64_t padded = (m + kRowPad - 1) / kRowPad * kRowPad;
  const Tensor q = Tensor::uninitialized({padded, weight.cols()}, DType::kF8E4M3, x.device());
  const Tensor scales = Tensor::uninitialized({groups, padded}, DType::kF32, x.device());
  constexpr int kWarps = 8;
  launch(quantize_groups_kernel, static_cast<unsigned>((padded * groups + kWarps - 1) / kWarps),
         kWarps * 32, 0, stream(), reinterpret_cast<const bf16*>(x.raw_data()), x.stride(0),
         static_cast<int>(m), static_cast<int>(padded), static_cast<int>(groups),
         reinterpret_cast<uint8_t*>(q.raw_data()), scales.data<float>());
  if (padded == m) return cublaslt_fp8_linear(q, scales, weight, out);
  // The padded product goes to scratch, and its first m rows to out.
  const Tensor full = Tensor::uninitialized({padded, n}, out.dtype(), x.device());
  cublaslt_fp8_linear(q, scales, weight, full);
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), full.raw_data(),
                                    static_cast<size_t>(m * n) * dtype_size(out.dtype()),
                                    cudaMemcpyDeviceToDevice, stream()));
}

void fp8_dequantized_linear(const Tensor& x, const Weight& weight, const Tensor& out) {
  check_fp8_linear(x, weight, out);
  if (x.size(0) == 0 || weight.rows() == 0) return;
  cublaslt_linear(x, dequantize(weight), out);
}

Tensor dequantize(const Weight& weight) {
  PAGODA_CHECK(weight.quantized() && weight.cols() % kPiece == 0 && aligned_rows(weight.values, 16),
               "dequantize of weight {}", weight.values.shape());
  Tensor dense =
      Tensor::uninitialized({weight.rows(), weight.cols()}, DType::kBF16, weight.device());
  const Fp8Args args = fp8_args(weight);
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>(weight.rows()),
                  static_cast<unsigned>((weight.cols() / kPiece + kThreads - 1) / kThreads));
  launch(dequantize_kernel, grid, kThreads, 0, stream(), args,
         reinterpret_cast<bf16*>(dense.raw_data()));
  return dense;
}

}  // namespace pagoda::cuda
