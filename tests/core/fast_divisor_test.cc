#include "core/fast_divisor.h"

#include <gtest/gtest.h>

#include <random>

namespace pagoda {
namespace {

// Every divisor up to 1100 (powers of two, their neighbours and everything between) against the
// built-in division: all numerators below 5000, the multiples of the divisor and their neighbours
// up to 2^31 - 1, and random ones over the whole range.
TEST(FastDivisorTest, MatchesIntegerDivision) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> any(0, INT32_MAX);
  for (int d = 1; d <= 1100; ++d) {
    const FastDivisor divisor(d);
    ASSERT_EQ(divisor.divisor(), d);
    for (int n = 0; n < 5000; ++n)
      ASSERT_EQ(divisor.divide(n), n / d) << n << " / " << d;
    for (int i = 0; i < 2000; ++i) {
      const int n = any(rng);
      ASSERT_EQ(divisor.divide(n), n / d) << n << " / " << d;
      const int64_t multiple = int64_t{n} / d * d;
      for (int64_t m : {multiple - 1, multiple, multiple + d - 1}) {
        if (m >= 0 && m <= INT32_MAX) {
          ASSERT_EQ(divisor.divide(static_cast<int>(m)), static_cast<int>(m) / d)
              << m << " / " << d;
        }
      }
    }
    ASSERT_EQ(divisor.divide(INT32_MAX), INT32_MAX / d) << d;
  }
}

TEST(FastDivisorTest, LargeDivisors) {
  for (int d : {65535, 65536, 65537, 1 << 20, (1 << 30) + 1, INT32_MAX}) {
    const FastDivisor divisor(d);
    for (int n : {0, 1, d - 1, d, INT32_MAX - 1, INT32_MAX})
      EXPECT_EQ(divisor.divide(n), n / d) << n << " / " << d;
  }
}

}  // namespace
}  // namespace pagoda
