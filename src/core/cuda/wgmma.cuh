// Hopper's warpgroup matrix products (wgmma.mma_async, sm_90a): a warpgroup of 4 warps multiplies
// a 64-row A by an N-column B, f32 accumulators in registers. Operands in shared memory are named
// by descriptors of the 128-byte swizzled layout: rows of 128 bytes (64 bf16), 8 rows (1 KiB,
// 1 KiB-aligned) to an atom, the 16-byte piece p of row r stored at piece p ^ (r % 8). The
// accumulator of rows 16w..16w+15 lives in warp w as mma.sync's m16n8 fragments, one per 8
// columns: d[j][0..1] is row g, columns 8j + 2 (lane % 4) + {0, 1}; d[j][2..3] the same columns of
// row g + 8 (g = lane / 4).
#pragma once

#include <cstdint>

namespace pagoda::cuda::wgmma {

// The descriptor of a 128-byte swizzled operand whose first row starts at `p` (shared memory):
// `leading` bytes between blocks of 64 elements along the contiguous dimension (used by N-major
// operands only: K-major ones step along K by moving `p` within the 128-byte rows), `stride` bytes
// between groups of 8 rows.
__device__ __forceinline__ uint64_t descriptor(const void* p, uint32_t leading, uint32_t stride) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((address & 0x3ffff) >> 4) |
         static_cast<uint64_t>((leading >> 4) & 0x3fff) << 16 |
         static_cast<uint64_t>((stride >> 4) & 0x3fff) << 32 | uint64_t{1} << 62;
}

// Byte offset of element (r, c) of a 128-byte swizzled bf16 tile of `rows` rows: columns in
// blocks of 64, each block's rows contiguous.
__host__ __device__ constexpr int swizzled_offset(int r, int c, int rows) {
  return c / 64 * rows * 128 + r * 128 + ((c % 64 / 8) ^ (r % 8)) * 16 + c % 8 * 2;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAGODA_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
// Built for a target without wgmma (the host pass, or an architecture other than sm_90a): the
// kernels that call these are never launched there (prefill_ctas_available).
#define PAGODA_WGMMA_ASM(...) __trap()
#endif

// Orders the warpgroup's register and shared-memory accesses before the products that follow.
__device__ __forceinline__ void fence() {
  PAGODA_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  PAGODA_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wait() {
  PAGODA_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written through the generic proxy (st.shared, cp.async) becomes visible to the
// products, which read it through the async proxy: called once the writes are known to be done (by
// the writer before a barrier, or by a reader after a barrier that counted them).
__device__ __forceinline__ void fence_shared_for_products() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of accumulators across a wait.
template <int kTiles>
__device__ __forceinline__ void hold(float (&d)[kTiles][4]) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      asm volatile("" : "+f"(d[j][e])::"memory");
  }
}

#define PAGODA_WG_ACC(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])

// d (+)= A · B, bf16 A (64 x 16, K-major) and B (16 x N, K-major) in shared memory; `accumulate`
// false overwrites d.
template <int kN>
__device__ __forceinline__ void mma_bf16_ss(float (&d)[kN / 8][4], uint64_t a, uint64_t b,
                                            bool accumulate);

template <>
__device__ __forceinline__ void mma_bf16_ss<64>(float (&d)[8][4], uint64_t a, uint64_t b,
                                                bool accumulate) {
  PAGODA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : PAGODA_WG_ACC(d, 0), PAGODA_WG_ACC(d, 1), PAGODA_WG_ACC(d, 2), PAGODA_WG_ACC(d, 3),
        PAGODA_WG_ACC(d, 4), PAGODA_WG_ACC(d, 5), PAGODA_WG_ACC(d, 6), PAGODA_WG_ACC(d, 7)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

template <>
__device__ __forceinline__ void mma_bf16_ss<128>(float (&d)[16][4], uint64_t a, uint64_t b,
                                                 bool accumulate) {
  PAGODA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : PAGODA_WG_ACC(d, 0), PAGODA_WG_ACC(d, 1), PAGODA_WG_ACC(d, 2), PAGODA_WG_ACC(d, 3),
        PAGODA_WG_ACC(d, 4), PAGODA_WG_ACC(d, 5), PAGODA_WG_ACC(d, 6), PAGODA_WG_ACC(d, 7),
        PAGODA_WG_ACC(d, 8), PAGODA_WG_ACC(d, 9), PAGODA_WG_ACC(d, 10), PAGODA_WG_ACC(d, 11),
        PAGODA_WG_ACC(d, 12), PAGODA_WG_ACC(d, 13), PAGODA_WG_ACC(d, 14), PAGODA_WG_ACC(d, 15)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// A warpgroup's registers a thread, raised or lowered to kCount (24-256, a multiple of 8): a CTA's
// warpgroups that do different work hand registers to one another. The kernel must declare its
// CTA size and one CTA a multiprocessor (__launch_bounds__), and the counts must fit the register
// file, or the raise waits forever.
template <int kCount>
__device__ __forceinline__ void raise_registers() {
  static_assert(kCount >= 24 && kCount <= 256 && kCount % 8 == 0);
  PAGODA_WGMMA_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kCount));
}
template <int kCount>
__device__ __forceinline__ void lower_registers() {
  static_assert(kCount >= 24 && kCount <= 256 && kCount % 8 == 0);
  PAGODA_WGMMA_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kCount));
}

// d += A · B, bf16 A (64 x 16) in registers as mma.sync's m16n8k16 A fragments (warp w's rows
// 16w..16w+15), B (16 x 128) in shared memory N-major (each 128-byte row holds 64 columns of one
// of B's 16 rows).
__device__ __forceinline__ void mma_bf16_rs_n128_mn_major(float (&d)[16][4], const uint32_t (&a)[4],
                                                          uint64_t b) {
  PAGODA_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : PAGODA_WG_ACC(d, 0), PAGODA_WG_ACC(d, 1), PAGODA_WG_ACC(d, 2), PAGODA_WG_ACC(d, 3),
        PAGODA_WG_ACC(d, 4), PAGODA_WG_ACC(d, 5), PAGODA_WG_ACC(d, 6), PAGODA_WG_ACC(d, 7),
        PAGODA_WG_ACC(d, 8), PAGODA_WG_ACC(d, 9), PAGODA_WG_ACC(d, 10), PAGODA_WG_ACC(d, 11),
        PAGODA_WG_ACC(d, 12), PAGODA_WG_ACC(d, 13), PAGODA_WG_ACC(d, 14), PAGODA_WG_ACC(d, 15)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

#undef PAGODA_WGMMA_ASM
#undef PAGODA_WG_ACC

}  // namespace pagoda::cuda::wgmma
