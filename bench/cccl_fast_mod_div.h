// FlashInfer 0.6.18's fastdiv.cuh wraps cuda::fast_mod_div<uint32_t>, which the CCCL of CUDA 13.0
// lacks. This is an exact substitute for the part it uses (a divisor, n / d and n % d), included
// before any FlashInfer header; where CCCL has its own, this adds nothing.
#pragma once

#include <cuda_runtime.h>
#include <cuda/cmath>

#include <cstdint>
#include <type_traits>

#if !__has_include(<cuda/__cmath/fast_modulo_division.h>)
namespace cuda {

// Division by a runtime divisor d >= 1 as a multiply-high, add and shift (Granlund and Montgomery
// 1994, figure 4.1): with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1 < 2^32,
// n / d = (umulhi(m, n) + n) >> l for every 32-bit n. The sum is taken in 64 bits, as it may
// carry past 32.
template <typename T>
class fast_mod_div {
  static_assert(std::is_same_v<T, uint32_t>, "only the uint32_t divisor FlashInfer uses");

 public:
  __host__ __device__ explicit fast_mod_div(uint32_t divisor) : divisor_(divisor) {
    while ((uint64_t{1} << shift_) < divisor)
      ++shift_;
    multiplier_ = static_cast<uint32_t>(
        (uint64_t{1} << 32) * ((uint64_t{1} << shift_) - divisor) / divisor + 1);
  }

  friend __host__ __device__ uint32_t operator/(uint32_t n, fast_mod_div d) {
#ifdef __CUDA_ARCH__
    const uint32_t high = __umulhi(d.multiplier_, n);
#else
    const uint32_t high = static_cast<uint32_t>(uint64_t{d.multiplier_} * n >> 32);
#endif
    return static_cast<uint32_t>((uint64_t{high} + n) >> d.shift_);
  }
  friend __host__ __device__ uint32_t operator%(uint32_t n, fast_mod_div d) {
    return n - n / d * d.divisor_;
  }

 private:
  uint32_t divisor_;
  uint32_t multiplier_ = 0;
  uint32_t shift_ = 0;
};

}  // namespace cuda
#endif
