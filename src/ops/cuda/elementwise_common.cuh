// Helpers shared by the CUDA elementwise ops (elementwise.cu) and row ops (rows.cu): loads that
// widen 1 or 8 elements to f32 and stores that round them back, grid-stride loops, launch shapes,
// dtype dispatch and argument checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/context.h"
#include "ops/cuda/ops.h"

namespace pagoda::cuda::elementwise {

constexpr int kPack = 8;  // elements per vectorized access
constexpr int kThreads = 256;

template <typename T>
struct TypeTag {
  using type = T;
};

template <int kWidth>
using Width = std::integral_constant<int, kWidth>;

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

// kWidth elements move as whole 16-byte chunks when they fill them (the address must then be
// 16-byte aligned), else one element at a time.
template <typename T, int kWidth>
struct Chunk {
  static constexpr int kSize = kWidth * sizeof(T) % 16 == 0 ? 16 / sizeof(T) : 1;
  struct alignas(kSize * sizeof(T)) Type {
    T e[kSize];
  };
};

// Loads kWidth consecutive elements widened to f32.
template <typename T, int kWidth>
__device__ __forceinline__ void load(const T* p, float (&v)[kWidth]) {
  using C = Chunk<T, kWidth>;
#pragma unroll
  for (int c = 0; c < kWidth / C::kSize; ++c) {
    const typename C::Type chunk = reinterpret_cast<const typename C::Type*>(p)[c];
#pragma unroll
    for (int j = 0; j < C::kSize; ++j)
      v[c * C::kSize + j] = to_float(chunk.e[j]);
  }
}

// Rounds kWidth f32 values to T and stores them.
template <typename T, int kWidth>
__device__ __forceinline__ void store(T* p, const float (&v)[kWidth]) {
  using C = Chunk<T, kWidth>;
#pragma unroll
  for (int c = 0; c < kWidth / C::kSize; ++c) {
    typename C::Type chunk;
#pragma unroll
    for (int j = 0; j < C::kSize; ++j)
      chunk.e[j] = from_float<T>(v[c * C::kSize + j]);
    reinterpret_cast<typename C::Type*>(p)[c] = chunk;
  }
}

// Grid-stride over n contiguous elements: body(i, Width<W>{}) handles elements [i, i + W). With
// kVector, W is kPack and the last n % kPack elements go one at a time.
template <bool kVector, typename Body>
__device__ __forceinline__ void for_each_pack(int64_t n, Body&& body) {
  constexpr int kWidth = kVector ? kPack : 1;
  const int64_t thread = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t threads = int64_t{gridDim.x} * blockDim.x;
  const int64_t packs = n / kWidth;
  for (int64_t p = thread; p < packs; p += threads)
    body(p * kWidth, Width<kWidth>{});
  if constexpr (kVector) {
    if (packs * kWidth + thread < n) body(packs * kWidth + thread, Width<1>{});
  }
}

inline bool aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
}

// The 16-byte accesses apply to rows: the first element and every row (all strides but the
// innermost) start on 16-byte boundaries. The row length is the caller's to check.
inline bool vectorizable(const Tensor& t) {
  if (!aligned16(t)) return false;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) {
    if (t.stride(d) * t.element_size() % 16 != 0) return false;
  }
  return true;
}

template <typename T>
T* data_of(const Tensor& t) {
  return reinterpret_cast<T*>(t.raw_data());
}

// The gate's activation of a gated MLP (ops/activation.h).
template <Activation kActivation>
__device__ __forceinline__ float activate(float g) {
  if constexpr (kActivation == Activation::kSilu) {
    return g / (1.0f + expf(-g));
  } else {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
  }
}

inline int round_up_32(int64_t n) {
  return static_cast<int>((n + 31) / 32 * 32);
}

// Blocks of kThreads for a grid-stride loop over `work` items: enough to fill the device.
inline int flat_blocks(int64_t work) {
  const int64_t wanted = (work + kThreads - 1) / kThreads;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, int64_t{multiprocessor_count()} * 8));
}

// Makes the tensors' device current and returns its stream. Every defined tensor must be on the
// same CUDA device.
template <typename... Rest>
cudaStream_t device_stream(const Tensor& first, const Rest&... rest) {
  PAGODA_CHECK(first.defined() && !first.device().is_cpu(), "CUDA op on a non-CUDA tensor");
  const Device device = first.device();
  PAGODA_CHECK(((!rest.defined() || rest.device() == device) && ...),
               "CUDA op on tensors of different devices");
  int current = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) PAGODA_CUDA_CHECK(cudaSetDevice(device.index));
  return stream();
}

// Calls f(TypeTag<T>{}) for an activation dtype: f32 or bf16.
template <typename F>
inline void dispatch_activation(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(TypeTag<float>{});
    case DType::kBF16:
      return f(TypeTag<__nv_bfloat16>{});
    default:
      fail("CUDA {} takes float32 or bfloat16 activations; got {}", op, dtype_name(dtype));
  }
}

// Calls f(TypeTag<T>{}) for a weight or conversion dtype: f32, f16 or bf16.
template <typename F>
inline void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(TypeTag<float>{});
    case DType::kF16:
      return f(TypeTag<__half>{});
    case DType::kBF16:
      return f(TypeTag<__nv_bfloat16>{});
    default:
      fail("CUDA {} takes float32, float16 or bfloat16; got {}", op, dtype_name(dtype));
  }
}

// Calls f(std::true_type{}) when the vectorized path applies, else f(std::false_type{}).
template <typename F>
inline void dispatch_vector(bool vector, F&& f) {
  if (vector) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    fail("CUDA {}: operands are {} and {}; they must match", op, dtype_name(a.dtype()),
         dtype_name(b.dtype()));
  }
}

// Rows with unit inner stride, as the row-wise kernels take them.
inline void check_rows(const Tensor& t, const char* what) {
  PAGODA_CHECK(t.dim() == 2 && (t.stride(1) == 1 || t.size(1) <= 1),
               "{} must be 2-D with unit inner stride; got shape {} strides {}", what, t.shape(),
               t.strides());
}

}  // namespace pagoda::cuda::elementwise
