// Division of non-negative 31-bit integers by a divisor known only at run time, as one multiply
// (high half) and one shift: for a divisor d with 2^(l-1) < d <= 2^l, the multiplier is
// floor(2^(31+l) / d) + 1, which fits 32 bits, and floor(n / d) = (2n * multiplier) >> (32 + l)
// for every 0 <= n < 2^31 (the round-up method of Granlund and Montgomery, for 31-bit numerators).
// Usable on the host and in CUDA kernels alike.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define PAGODA_HOST_DEVICE __host__ __device__
#else
#define PAGODA_HOST_DEVICE
#endif

namespace pagoda {

class FastDivisor {
 public:
  FastDivisor() = default;
  // divisor >= 1.
  explicit constexpr FastDivisor(int divisor) : divisor_(divisor) {
    while ((int64_t{1} << shift_) < divisor)
      ++shift_;
    multiplier_ = static_cast<uint32_t>((uint64_t{1} << (31 + shift_)) / divisor + 1);
  }

  PAGODA_HOST_DEVICE constexpr int divisor() const { return divisor_; }

  // n / divisor for 0 <= n < 2^31.
  PAGODA_HOST_DEVICE int divide(int n) const {
    const uint32_t twice = static_cast<uint32_t>(n) << 1;
#ifdef __CUDA_ARCH__
    return static_cast<int>(__umulhi(twice, multiplier_) >> shift_);
#else
    return static_cast<int>(((uint64_t{twice} * multiplier_) >> 32) >> shift_);
#endif
  }

 private:
  uint32_t multiplier_ = 0;
  int shift_ = 0;
  int divisor_ = 1;
};

}  // namespace pagoda
