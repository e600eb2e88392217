// Row-wise CUDA ops (see ops.h): embedding, RMSNorm (with the residual add fused), RoPE. Everything
// is computed in f32 and rounded to the output dtype once; kernels move 8 elements per access when
// every pointer and row stride involved is 16-byte aligned, one element at a time otherwise.
#include <algorithm>
#include <cstdint>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "ops/cuda/elementwise_common.cuh"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

using namespace elementwise;

constexpr int kNormWarpThreads = 128;  // blocks of rms_norm on rows that fit in a warp

// Sum of v over the threads that share a row: `lanes` lanes of a warp (a power of two, at most
// 32, aligned within the warp) with kWarpPerRow, else the whole block (blockDim.x a multiple of
// 32). Every lane of the warp takes part. A kernel that calls it twice passes a barrier between.
template <bool kWarpPerRow>
__device__ __forceinline__ float row_sum(float v, int lanes) {
  for (int offset = (kWarpPerRow ? lanes : 32) / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  if constexpr (!kWarpPerRow) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32;
    if (lane == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    // Every warp reduces the partials itself, so no second barrier is needed.
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

template <typename W, typename T, bool kVector>
__global__ void embedding_kernel(const W* table,  // [vocab, hidden], row stride table_stride
                                 int64_t table_stride, int64_t vocab,
                                 const int32_t* ids,  // [tokens]
                                 T* out,              // [tokens, hidden], row stride out_stride
                                 int64_t out_stride, int64_t tokens, int hidden, float scale) {
  constexpr int kWidth = kVector ? kPack : 1;
  start_after_prior_kernels();
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int64_t id = ids[t];
    const bool valid = id >= 0 && id < vocab;
    const W* row = table + (valid ? id : 0) * table_stride;
    for (int p = threadIdx.x; p < hidden / kWidth; p += blockDim.x) {
      float v[kWidth];
      if (valid) load(row + p * kWidth, v);
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        v[j] = valid ? v[j] * scale : 0.0f;
      store(out + t * out_stride + p * kWidth, v);
    }
  }
}

// The norm's scaling of the kWidth values of pack p: v * inverse * (w + offset), the factor 1
// without a weight.
template <typename W, int kWidth>
__device__ __forceinline__ void scale_row_piece(float (&v)[kWidth], float inverse, const W* weight,
                                                float offset, int p) {
  float w[kWidth];
  if (weight != nullptr) load(weight + p * kWidth, w);
#pragma unroll
  for (int j = 0; j < kWidth; ++j)
    v[j] = v[j] * inverse * (weight != nullptr ? w[j] + offset : 1.0f);
}

// The sum of squares of this thread's packs p = first, first + step, ... of a row.
template <int kWidth, typename T>
__device__ __forceinline__ float sum_squares(const T* row, int first, int packs, int step) {
  float sum = 0.0f;
  for (int p = first; p < packs; p += step) {
    float v[kWidth];
    load(row + p * kWidth, v);
#pragma unroll
    for (int j = 0; j < kWidth; ++j)
      sum += v[j] * v[j];
  }
  return sum;
}

// 1 / rms of a row of `dim` elements whose squares sum to `sum`.
__device__ __forceinline__ float inverse_rms(float sum, int dim, float eps) {
  return 1.0f / sqrtf(sum / static_cast<float>(dim) + eps);
}

// out = source normalised by `inverse` and the weight, for packs p = first, first + step, ...
template <int kWidth, typename T, typename W>
__device__ __forceinline__ void store_normalised(const T* source, T* out, float inverse,
                                                 const W* weight, float offset, int first,
                                                 int packs, int step) {
  for (int p = first; p < packs; p += step) {
    float v[kWidth];
    load(source + p * kWidth, v);
    scale_row_piece(v, inverse, weight, offset, p);
    store(out + p * kWidth, v);
  }
}

template <typename T, typename W>
struct NormArgs {
  const T* x;  // [rows, dim], row stride x_stride
  int64_t x_stride;
  T* out;  // [rows, dim], row stride out_stride; may alias x
  int64_t out_stride;
  T* residual;      // [rows, dim] contiguous: add_rms_norm adds x into it first; else null
  const W* weight;  // [dim], or null for a norm without scale
  int64_t rows;
  int dim;
  float eps;
  float weight_offset;
  int lanes;  // threads per row when rows fit in a warp: 8, 16 or 32
};

// Short rows take `lanes` threads of a warp each (several rows a warp), long rows a block each.
// Pass 1 sums squares (after the residual add, whose rounded result is what gets normalised); pass
// 2 re-reads the row and scales it. Each element is read and written by the same thread in both
// passes, so out may alias x or the residual.
template <typename T, typename W, bool kVector, bool kWarpPerRow, bool kAddResidual>
__global__ void __launch_bounds__(kWarpPerRow ? kNormWarpThreads : 1024)
    rms_norm_kernel(NormArgs<T, W> args) {
  constexpr int kWidth = kVector ? kPack : 1;
  start_after_prior_kernels();
  const int group = kWarpPerRow ? args.lanes : blockDim.x;
  const int64_t row =
      kWarpPerRow ? (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / group : blockIdx.x;
  const int lane = threadIdx.x % group;
  const int packs = args.dim / kWidth;
  // Lanes past the last row skip the loops but still take part in the shuffles.
  const int first = row < args.rows ? lane : packs;
  const T* x = args.x + row * args.x_stride;
  T* residual = kAddResidual ? args.residual + row * args.dim : nullptr;

  float sum = 0.0f;
  for (int p = first; p < packs; p += group) {
    float v[kWidth];
    load(x + p * kWidth, v);
    if constexpr (kAddResidual) {
      float r[kWidth];
      load(residual + p * kWidth, r);
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        v[j] = to_float(from_float<T>(v[j] + r[j]));
      store(residual + p * kWidth, v);
    }
#pragma unroll
    for (int j = 0; j < kWidth; ++j)
      sum += v[j] * v[j];
  }
  const float inverse = inverse_rms(row_sum<kWarpPerRow>(sum, group), args.dim, args.eps);
  store_normalised<kWidth>(kAddResidual ? residual : x, args.out + row * args.out_stride, inverse,
                           args.weight, args.weight_offset, first, packs, group);
}

template <typename T, typename W>
struct AddNormedArgs {
  T* residual;  // [rows, dim] contiguous
  const T* x;   // [rows, dim] contiguous
  T* out;       // [rows, dim] contiguous, or null
  const W* x_weight;
  const W* out_weight;
  int dim;
  float x_eps;
  float x_offset;
  float scale;
  float out_eps;
  float out_offset;
};

// A block per row, with rms_norm_kernel's block shape and order of sums, so each step rounds as
// the separate ops would. Each element is read and written by one thread, so out may alias the
// residual.
template <typename T, typename W, bool kVector>
__global__ void __launch_bounds__(1024) add_normed_kernel(AddNormedArgs<T, W> args) {
  constexpr int kWidth = kVector ? kPack : 1;
  start_after_prior_kernels();
  const int64_t row = blockIdx.x;
  const int packs = args.dim / kWidth;
  const T* x = args.x + row * args.dim;
  T* residual = args.residual + row * args.dim;

  const float x_sum = sum_squares<kWidth>(x, threadIdx.x, packs, blockDim.x);
  const float x_inverse = inverse_rms(row_sum<false>(x_sum, 0), args.dim, args.x_eps);
  __syncthreads();  // row_sum's shared partials are used again below

  float sum = 0.0f;
  for (int p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[kWidth];
    float r[kWidth];
    load(x + p * kWidth, v);
    load(residual + p * kWidth, r);
    scale_row_piece(v, x_inverse, args.x_weight, args.x_offset, p);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      r[j] = to_float(from_float<T>(r[j] + to_float(from_float<T>(v[j]))));
      if (args.scale != 1.0f) r[j] = to_float(from_float<T>(r[j] * args.scale));
      sum += r[j] * r[j];
    }
    store(residual + p * kWidth, r);
  }
  if (args.out == nullptr) return;
  const float inverse = inverse_rms(row_sum<false>(sum, 0), args.dim, args.out_eps);
  store_normalised<kWidth>(residual, args.out + row * args.dim, inverse, args.out_weight,
                           args.out_offset, threadIdx.x, packs, blockDim.x);
}

template <typename T, typename W>
struct RopeArgs {
  T* x;  // [tokens, heads, dim], strides token_stride, head_stride, 1
  int64_t token_stride;
  int64_t head_stride;
  const float* inverse_frequencies;  // [half]
  const int64_t* positions;          // [>= tokens]
  const W* weight;                   // norm_rope's weight, or null
  float eps;
  float weight_offset;
  int heads;
  int dim;
  int half;   // rotary_dim / 2
  int lanes;  // threads per head: 8, 16 or 32
  int heads_per_block;
};

// The tensors of one launch (q, k and v of a layer): part p takes blocks.y from first_block[p].
template <typename T, typename W>
struct RopeParts {
  RopeArgs<T, W> part[kMaxRopeParts];
  int first_block[kMaxRopeParts];
  int count;
};

// Block (token, group of heads), `lanes` threads a head. With kNorm each head is first
// normalised as rms_norm would store it (pass 1 sums its squares); then the pairs (i, i + half)
// rotate and, with kNorm, the dims past the rotary ones are scaled. The block's cos/sin table
// [2, half] goes to shared memory. sincosf, not __sincosf: angles reach 1e5 radians at long
// positions.
template <typename T, typename W, bool kVector, bool kNorm>
__global__ void rope_kernel(const RopeParts<T, W> parts) {
  constexpr int kWidth = kVector ? kPack : 1;
  extern __shared__ float table[];  // [2, half]: cos, then sin
  int p = 0;
  while (p + 1 < parts.count && static_cast<int>(blockIdx.y) >= parts.first_block[p + 1])
    ++p;
  const RopeArgs<T, W>& args = parts.part[p];
  const int block = static_cast<int>(blockIdx.y) - parts.first_block[p];
  start_after_prior_kernels();
  const int64_t token = blockIdx.x;
  const float position = static_cast<float>(args.positions[token]);
  for (int i = threadIdx.x; i < args.half; i += blockDim.x) {
    sincosf(position * args.inverse_frequencies[i], &table[args.half + i], &table[i]);
  }
  const int lane = threadIdx.x % args.lanes;
  const int local = threadIdx.x / args.lanes;
  const int head = block * args.heads_per_block + local;
  // Threads past the block's heads skip the loops but still take part in the shuffles.
  const bool active = local < args.heads_per_block && head < args.heads;
  const int packs = active ? args.dim / kWidth : 0;
  const int half_packs = active ? args.half / kWidth : 0;
  T* v = args.x + token * args.token_stride + (active ? head : 0) * args.head_stride;
  float inverse = 1.0f;
  if constexpr (kNorm) {
    const float sum = sum_squares<kWidth>(v, lane, packs, args.lanes);
    inverse = inverse_rms(row_sum<true>(sum, args.lanes), args.dim, args.eps);
  }
  // The kWidth values of pack p, normalised and rounded as the norm stores them.
  auto normalise = [&](float(&e)[kWidth], int p) {
    if constexpr (kNorm) {
      scale_row_piece(e, inverse, args.weight, args.weight_offset, p);
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        e[j] = to_float(from_float<T>(e[j]));
    }
  };
  __syncthreads();  // the table
  for (int i = lane; i < half_packs; i += args.lanes) {
    float lo[kWidth];
    float hi[kWidth];
    load(v + i * kWidth, lo);
    load(v + i * kWidth + args.half, hi);
    normalise(lo, i);
    normalise(hi, i + half_packs);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      const float c = table[i * kWidth + j];
      const float s = table[args.half + i * kWidth + j];
      const float a = lo[j];
      lo[j] = a * c - hi[j] * s;
      hi[j] = hi[j] * c + a * s;
    }
    store(v + i * kWidth, lo);
    store(v + i * kWidth + args.half, hi);
  }
  if constexpr (kNorm) {
    for (int p = 2 * half_packs + lane; p < packs; p += args.lanes) {
      float e[kWidth];
      load(v + p * kWidth, e);
      normalise(e, p);
      store(v + p * kWidth, e);
    }
  }
}

// Shared by rms_norm and add_rms_norm: residual is undefined for a plain norm.
void launch_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                     float weight_offset, const Tensor& out) {
  check_rows(x, "rms_norm input");
  check_rows(out, "rms_norm output");
  const int64_t rows = x.size(0);
  const int64_t dim = x.size(1);
  PAGODA_CHECK(out.shape() == x.shape() && dim > 0 && dim <= (int64_t{1} << 30),
               "rms_norm shapes {} -> {}", x.shape(), out.shape());
  PAGODA_CHECK(!weight.defined() || (weight.numel() == dim && weight.is_contiguous()),
               "rms_norm weight shape {} for dim {}", weight.shape(), dim);
  check_same_dtype("rms_norm", x, out);
  const bool add = residual.defined();
  if (add) check_same_dtype("add_rms_norm", residual, x);
  const cudaStream_t s = device_stream(x, out, weight, residual);
  if (rows == 0) return;

  const bool vector = dim % kPack == 0 && vectorizable(x) && vectorizable(out) &&
                      (!weight.defined() || vectorizable(weight)) &&
                      (!add || vectorizable(residual));
  const int64_t packs = vector ? dim / kPack : dim;
  // Short rows (per-head norms) take 8 to 32 lanes of a warp each, with a pack or two per lane;
  // long rows a block of up to 1024 threads, one pack each.
  const bool warp_per_row = packs <= 64;
  int lanes = 8;
  while (lanes < 32 && lanes < packs)
    lanes *= 2;
  const int threads =
      warp_per_row ? kNormWarpThreads : std::min(1024, std::max(64, round_up_32(packs)));
  const int64_t rows_per_block = warp_per_row ? kNormWarpThreads / lanes : 1;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  PAGODA_CHECK(blocks <= 0x7fffffff, "rms_norm has too many rows: {}", rows);

  dispatch_activation(x.dtype(), "rms_norm", [&](auto act) {
    using T = typename decltype(act)::type;
    const DType weight_dtype = weight.defined() ? weight.dtype() : x.dtype();
    dispatch_float(weight_dtype, "rms_norm weight", [&](auto w) {
      using W = typename decltype(w)::type;
      const NormArgs<T, W> args{data_of<const T>(x),
                                x.stride(0),
                                data_of<T>(out),
                                out.stride(0),
                                add ? data_of<T>(residual) : nullptr,
                                weight.defined() ? data_of<const W>(weight) : nullptr,
                                rows,
                                static_cast<int>(dim),
                                eps,
                                weight_offset,
                                lanes};
      dispatch_vector(vector, [&](auto vec) {
        constexpr bool kVector = decltype(vec)::value;
        const auto kernel = warp_per_row ? (add ? rms_norm_kernel<T, W, kVector, true, true>
                                                : rms_norm_kernel<T, W, kVector, true, false>)
                                         : (add ? rms_norm_kernel<T, W, kVector, false, true>
                                                : rms_norm_kernel<T, W, kVector, false, false>);
        launch(kernel, static_cast<unsigned>(blocks), threads, 0, s, args);
      });
    });
  });
}

// Shared by rope and norm_rope: with `normalise` false the parts are rotated only (their norms
// unused).
void launch_rope(std::span<const NormRopePart> parts, bool normalise,
                 const Tensor& inverse_frequencies, int64_t rotary_dim, const Tensor& positions) {
  PAGODA_CHECK(!parts.empty() && parts.size() <= kMaxRopeParts, "rope of {} tensors; 1 to {}",
               parts.size(), kMaxRopeParts);
  const int64_t half = rotary_dim / 2;
  PAGODA_CHECK(rotary_dim >= 0 && rotary_dim % 2 == 0, "rotary dim {}", rotary_dim);
  PAGODA_CHECK(rotary_dim == 0 ||
                   (inverse_frequencies.dtype() == DType::kF32 &&
                    inverse_frequencies.is_contiguous() && inverse_frequencies.numel() == half),
               "rope needs {} contiguous f32 inverse frequencies; got {} of shape {}", half,
               dtype_name(inverse_frequencies.dtype()), inverse_frequencies.shape());
  const Tensor& first = parts.front().x;
  const int64_t tokens = first.dim() == 3 ? first.size(0) : 0;
  PAGODA_CHECK(positions.dtype() == DType::kI64 && positions.dim() == 1 &&
                   positions.is_contiguous() && positions.size(0) >= tokens,
               "rope needs >= {} contiguous int64 positions; got {} of shape {}", tokens,
               dtype_name(positions.dtype()), positions.shape());
  const cudaStream_t s = device_stream(first, positions);
  if (rotary_dim > 0) device_stream(first, inverse_frequencies);
  bool vector = true;
  const Tensor* weight_of_dtype = nullptr;  // the parts' weights share one dtype
  for (const NormRopePart& part : parts) {
    const Tensor& x = part.x;
    PAGODA_CHECK(x.dim() == 3 && (x.stride(2) == 1 || x.size(2) <= 1),
                 "rope input must be [tokens, heads, head_size] with unit inner stride; got shape "
                 "{} strides {}",
                 x.shape(), x.strides());
    PAGODA_CHECK(x.size(0) == tokens && x.dtype() == first.dtype(),
                 "rope of tensors with different tokens or dtypes: {} {} and {} {}", first.shape(),
                 dtype_name(first.dtype()), x.shape(), dtype_name(x.dtype()));
    const int64_t dim = x.size(2);
    const int64_t rotated = part.rotate ? rotary_dim : 0;
    PAGODA_CHECK((rotated > 0 || normalise) && rotated <= dim, "rotary dim {} for head size {}",
                 rotated, dim);
    PAGODA_CHECK(
        x.size(1) <= (int64_t{1} << 20) && tokens <= 0x7fffffff && dim <= (int64_t{1} << 30),
        "rope shape {}", x.shape());
    const Tensor& weight = part.norm.weight;
    if (normalise && weight.defined()) {
      PAGODA_CHECK(weight.numel() == dim && weight.is_contiguous(),
                   "norm_rope weight shape {} for head size {}", weight.shape(), dim);
      PAGODA_CHECK(weight_of_dtype == nullptr || weight.dtype() == weight_of_dtype->dtype(),
                   "norm_rope weights of different dtypes");
      device_stream(x, weight);
      weight_of_dtype = &weight;
      vector = vector && vectorizable(weight);
    }
    device_stream(first, x);
    vector =
        vector && rotated / 2 % kPack == 0 && vectorizable(x) && (!normalise || dim % kPack == 0);
  }
  if (tokens == 0) return;
  const DType weight_dtype = weight_of_dtype != nullptr ? weight_of_dtype->dtype() : first.dtype();
  dispatch_activation(first.dtype(), "rope", [&](auto act) {
    using T = typename decltype(act)::type;
    dispatch_float(weight_dtype, "norm_rope weight", [&](auto w) {
      using W = typename decltype(w)::type;
      RopeParts<T, W> launch_parts{};
      int threads = 32;
      int blocks = 0;
      size_t shared_bytes = 0;
      for (const NormRopePart& part : parts) {
        const Tensor& x = part.x;
        const int64_t heads = x.size(1);
        const int64_t dim = x.size(2);
        const int64_t part_half = part.rotate ? half : 0;
        // Threads per head: enough for one pack each of the rotated half (the whole head when it
        // is normalised too), 8 to 32; about 128 threads a block, a head never split across
        // blocks.
        const int64_t packs = (normalise ? dim : part_half) / (vector ? kPack : 1);
        int lanes = 8;
        while (lanes < 32 && lanes < packs)
          lanes *= 2;
        const int64_t heads_per_block =
            std::clamp<int64_t>(128 / lanes, 1, std::max<int64_t>(heads, 1));
        const Tensor& weight = part.norm.weight;
        const int index = launch_parts.count++;
        launch_parts.first_block[index] = blocks;
        launch_parts.part[index] = {
            data_of<T>(x),
            x.stride(0),
            x.stride(1),
            part_half > 0 ? inverse_frequencies.data<float>() : nullptr,
            positions.data<int64_t>(),
            normalise && weight.defined() ? data_of<const W>(weight) : nullptr,
            part.norm.eps,
            part.norm.weight_offset,
            static_cast<int>(heads),
            static_cast<int>(dim),
            static_cast<int>(part_half),
            lanes,
            static_cast<int>(heads_per_block)};
        blocks += static_cast<int>((heads + heads_per_block - 1) / heads_per_block);
        threads = std::max(threads, round_up_32(heads_per_block * lanes));
        shared_bytes = std::max<size_t>(shared_bytes, 2 * part_half * sizeof(float));
      }
      if (blocks == 0) return;
      PAGODA_CHECK(blocks <= 65535, "rope of {} head blocks a token; at most 65535", blocks);
      const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(blocks));
      dispatch_vector(vector, [&](auto vec) {
        constexpr bool kVector = decltype(vec)::value;
        const auto kernel =
            normalise ? rope_kernel<T, W, kVector, true> : rope_kernel<T, W, kVector, false>;
        launch(kernel, grid, threads, shared_bytes, s, launch_parts);
      });
    });
  });
}

}  // namespace

void embedding(const Tensor& table, const Tensor& ids, float scale, const Tensor& out) {
  check_rows(table, "embedding table");
  check_rows(out, "embedding output");
  PAGODA_CHECK(ids.dim() == 1 && ids.is_contiguous() && ids.dtype() == DType::kI32,
               "embedding ids must be a contiguous 1-D int32 tensor; got {} of shape {}",
               dtype_name(ids.dtype()), ids.shape());
  const int64_t tokens = ids.size(0);
  const int64_t hidden = table.size(1);
  PAGODA_CHECK(out.size(0) == tokens && out.size(1) == hidden && hidden <= (int64_t{1} << 30),
               "embedding output shape {} for {} ids and hidden size {}", out.shape(), tokens,
               hidden);
  const cudaStream_t s = device_stream(out, table, ids);
  if (tokens == 0 || hidden == 0) return;
  const bool vector = hidden % kPack == 0 && vectorizable(table) && vectorizable(out);
  const int64_t packs = vector ? hidden / kPack : hidden;
  const int threads = std::min(1024, round_up_32(packs));  // one pack a thread up to 8192 bf16
  const int blocks = static_cast<int>(std::min<int64_t>(tokens, 65535));
  dispatch_float(table.dtype(), "embedding table", [&](auto w) {
    using W = typename decltype(w)::type;
    dispatch_activation(out.dtype(), "embedding", [&](auto act) {
      using T = typename decltype(act)::type;
      dispatch_vector(vector, [&](auto vec) {
        launch(embedding_kernel<W, T, decltype(vec)::value>, blocks, threads, 0, s,
               data_of<const W>(table), table.stride(0), table.size(0), ids.data<int32_t>(),
               data_of<T>(out), out.stride(0), tokens, static_cast<int>(hidden), scale);
      });
    });
  });
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out) {
  launch_rms_norm(x, Tensor(), weight, eps, weight_offset, out);
}

void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                  float weight_offset, const Tensor& out) {
  PAGODA_CHECK(residual.is_contiguous() && x.is_contiguous() && out.is_contiguous() &&
                   residual.shape() == x.shape(),
               "add_rms_norm needs contiguous residual, x and out of one shape; got {} and {}",
               residual.shape(), x.shape());
  launch_rms_norm(x, residual, weight, eps, weight_offset, out);
}

void add_normed(const Tensor& residual, const Tensor& x, const RmsNormParams& x_norm, float scale,
                const RmsNormParams& out_norm, const Tensor& out) {
  const bool has_out = out.defined();
  PAGODA_CHECK(residual.dim() == 2 && residual.is_contiguous() && x.is_contiguous() &&
                   residual.shape() == x.shape() &&
                   (!has_out || (out.is_contiguous() && out.shape() == x.shape())),
               "add_normed needs contiguous residual, x and out of one [rows, dim] shape; got {}, "
               "{} and {}",
               residual.shape(), x.shape(), has_out ? out.shape() : Shape{});
  check_same_dtype("add_normed", residual, x);
  if (has_out) check_same_dtype("add_normed", residual, out);
  const int64_t rows = x.size(0);
  const int64_t dim = x.size(1);
  PAGODA_CHECK(dim > 0 && dim <= (int64_t{1} << 30) && rows <= 0x7fffffff, "add_normed shape {}",
               x.shape());
  const Tensor& x_weight = x_norm.weight;
  const Tensor& out_weight = out_norm.weight;
  for (const Tensor* w : {&x_weight, &out_weight}) {
    PAGODA_CHECK(!w->defined() || (w->numel() == dim && w->is_contiguous()),
                 "add_normed weight shape {} for dim {}", w->shape(), dim);
  }
  PAGODA_CHECK(
      !x_weight.defined() || !out_weight.defined() || x_weight.dtype() == out_weight.dtype(),
      "add_normed weights of dtypes {} and {}", dtype_name(x_weight.dtype()),
      dtype_name(out_weight.dtype()));
  const cudaStream_t s = device_stream(residual, x, out, x_weight, out_weight);
  if (rows == 0) return;
  const bool vector = dim % kPack == 0 && vectorizable(residual) && vectorizable(x) &&
                      (!has_out || vectorizable(out)) &&
                      (!x_weight.defined() || vectorizable(x_weight)) &&
                      (!out_weight.defined() || vectorizable(out_weight));
  const int64_t packs = vector ? dim / kPack : dim;
  const int threads = std::min(1024, std::max(64, round_up_32(packs)));  // as rms_norm's blocks
  dispatch_activation(x.dtype(), "add_normed", [&](auto act) {
    using T = typename decltype(act)::type;
    const DType weight_dtype = x_weight.defined()     ? x_weight.dtype()
                               : out_weight.defined() ? out_weight.dtype()
                                                      : x.dtype();
    dispatch_float(weight_dtype, "add_normed weight", [&](auto w) {
      using W = typename decltype(w)::type;
      auto weight_data = [](const Tensor& t) {
        return t.defined() ? data_of<const W>(t) : nullptr;
      };
      const AddNormedArgs<T, W> args{data_of<T>(residual),
                                     data_of<const T>(x),
                                     has_out ? data_of<T>(out) : nullptr,
                                     weight_data(x_weight),
                                     weight_data(out_weight),
                                     static_cast<int>(dim),
                                     x_norm.eps,
                                     x_norm.weight_offset,
                                     scale,
                                     out_norm.eps,
                                     out_norm.weight_offset};
      dispatch_vector(vector, [&](auto vec) {
        launch(add_normed_kernel<T, W, decltype(vec)::value>, static_cast<unsigned>(rows), threads,
               0, s, args);
      });
    });
  });
}

void rope(const Tensor& inverse_frequencies, int64_t rotary_dim, const Tensor& positions,
          const Tensor& x) {
  const NormRopePart part{x, {}, true};
  launch_rope({&part, 1}, false, inverse_frequencies, rotary_dim, positions);
}

void norm_rope(const RmsNormParams& norm, const Tensor& inverse_frequencies, int64_t rotary_dim,
               const Tensor& positions, const Tensor& x) {
  const NormRopePart part{x, norm, true};
  launch_rope({&part, 1}, true, inverse_frequencies, rotary_dim, positions);
}

void norm_rope(std::span<const NormRopePart> parts, const Tensor& inverse_frequencies,
               int64_t rotary_dim, const Tensor& positions) {
  launch_rope(parts, true, inverse_frequencies, rotary_dim, positions);
}

}  // namespace pagoda::cuda
