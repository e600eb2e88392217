// Inline PTX the paged attention kernels are built from: cp.async copies into shared memory,
// ldmatrix, e4m3 rows widened and narrowed, and the special-function-unit exp2; with the
// tensor-core products of core/cuda/tensor_core.cuh (bf16, or f16 for e4m3 pages) (sm_89+); and
// the shared-memory and named barriers of the warpgroup prefill kernel (sm_90).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/tensor_core.cuh"

namespace pagoda::cuda::attention {

using bf16 = __nv_bfloat16;
using f16 = __half;
using e4m3 = __nv_fp8_e4m3;

// The type the tensor cores multiply for pages of T: bf16 pages as they are; e4m3 pages widened to
// f16, which holds every e4m3 value exactly (queries and probabilities are rounded to f16).
template <typename T>
using MathType = std::conditional_t<std::is_same_v<T, e4m3>, f16, bf16>;

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copy_16(void* dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: fill the destination with zeros
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void copy_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Shared-memory barriers (mbarrier) that count `count` arrivals a phase; each completed phase
// flips the parity that waiters name.
__device__ __forceinline__ void barrier_init(uint64_t* barrier, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(barrier)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(barrier))
               : "memory");
}
// An arrival that lands once every cp.async this thread has issued so far has.
__device__ __forceinline__ void barrier_arrive_after_copies(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(barrier))
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, int parity) {
  uint32_t done = 0;
  while (done == 0) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(barrier)), "r"(parity)
        : "memory");
  }
}
// A barrier arrival that also expects `bytes` more from bulk copies in this phase.
__device__ __forceinline__ void barrier_arrive_expecting(uint64_t* barrier, uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(barrier)),
      "r"(bytes)
      : "memory");
}

// Tensor memory access (TMA, sm_90): copies of a box of a tensor described by a CUtensorMap
// (a kernel parameter) into shared memory, counted in bytes on a barrier; and the proxy fences
// that order this thread's ordinary memory accesses before such copies.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PAGODA_TMA_ASM(...) asm volatile(__VA_ARGS__)
#else
// Built for an older target (or the host pass): never launched there (decode_page_maps).
#define PAGODA_TMA_ASM(...) __trap()
#endif
__device__ __forceinline__ void copy_box_5d(void* dst, const void* map, int c0, int c1, int c2,
                                            int c3, int c4, uint64_t* barrier) {
  PAGODA_TMA_ASM(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(smem_address(barrier))
      : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  PAGODA_TMA_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_shared() {
  PAGODA_TMA_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() {
  PAGODA_TMA_ASM("fence.proxy.async.global;\n" ::: "memory");
}

// Named barrier `id` (1-15) of `threads` threads: wait there, or arrive without waiting.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void load_matrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void load_matrix_x2_trans(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void load_matrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// Eight bf16 (a 16-byte piece) as the math type M: as they are for bf16; for f16, clamped to its
// range (a query beyond +-65504 would otherwise become infinite).
template <typename M>
__device__ __forceinline__ uint4 to_math(uint4 x) {
  if constexpr (std::is_same_v<M, bf16>) {
    return x;
  } else {
    uint32_t* w = reinterpret_cast<uint32_t*>(&x);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = bf16x2_to_f16x2(w[i]);
    return x;
  }
}

// Eight e4m3 (8 bytes) widened to eight f16 (16 bytes), exactly.
__device__ __forceinline__ uint4 widen_e4m3(uint2 x) {
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
  const uint32_t in[2] = {x.x, x.y};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    o[i] = e4m3x2_to_f16x2(in[i / 2] >> (16 * (i % 2)));
  return out;
}

// Eight bf16 (16 bytes) times `factor`, rounded to e4m3 (8 bytes), to nearest even, saturating at
// +-448.
__device__ __forceinline__ uint2 narrow_to_e4m3(uint4 x, float factor) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&x);
  uint32_t out[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f.x *= factor;
    f.y *= factor;
    const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
    out[i / 2] |= static_cast<uint32_t>(pair) << (16 * (i % 2));
  }
  return make_uint2(out[0], out[1]);
}

// 2^x on the special-function unit; 2^-inf is 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace pagoda::cuda::attention
