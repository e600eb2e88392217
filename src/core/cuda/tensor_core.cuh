// Tensor-core products and the conversions that feed them, shared by the attention kernels and the
// FP8 matrix-vector kernel: m16n8k16 and m16n8k8 mma.sync (bf16 or f16 inputs, f32 accumulate),
// packing pairs of floats, and e4m3 or bf16 pairs widened or narrowed to f16 pairs (sm_89+).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace pagoda::cuda {

// c += a · b for a 16x16 A (row-major), a 16x8 B (column-major), both of type M (__nv_bfloat16 or
// __half), f32 C.
template <typename M>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<M, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// c += a · b for a 16x8 A (row-major, two registers), an 8x8 B (column-major), both of type M,
// f32 C.
template <typename M>
__device__ __forceinline__ void mma_k8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  if constexpr (std::is_same_v<M, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(b));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(b));
  }
}

// (lo, hi) rounded to M, lo in the low half.
template <typename M>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<M, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The e4m3 pair in the low 16 bits of `pair` as an f16 pair, exactly (the low byte's value in the
// low half).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

// A bf16 pair as an f16 pair, each clamped to f16's range (+-65504; past it f16 has only
// infinity).
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t pair) {
  const float lo = fminf(fmaxf(__uint_as_float(pair << 16), -65504.0f), 65504.0f);
  const float hi = fminf(fmaxf(__uint_as_float(pair & 0xffff0000u), -65504.0f), 65504.0f);
  return pack<__half>(lo, hi);
}

}  // namespace pagoda::cuda
