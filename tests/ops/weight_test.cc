#include "ops/weight.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cpu/matmul.h"

namespace pagoda {
namespace {

Tensor random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = normal(rng) * (i % 7 == 0 ? 10.0f : 1.0f);
  return t;
}

std::vector<float> dequantized(const Weight& weight) {
  std::vector<float> out(weight.rows() * weight.cols());
  dequantize_rows(weight, 0, weight.rows(), out.data());
  return out;
}

// Each block's scale is its largest magnitude / 448, and every value comes back within half an
// e4m3 step of itself: 2^-4 relative for normals, half the smallest subnormal step below.
TEST(WeightTest, QuantizesInBlocks) {
  const int64_t n = 70, k = 96, rows = 32, cols = 32;  // partial last row block
  const Tensor values = random_matrix(n, k, 1);
  const Weight weight = quantize_fp8(values, rows, cols);
  ASSERT_TRUE(weight.quantized());
  EXPECT_EQ(weight.scales.shape(), (Shape{3, 3}));
  EXPECT_EQ(weight.bytes(), n * k + 9 * 4);
  const std::vector<float> back = dequantized(weight);
  for (int64_t bi = 0; bi < 3; ++bi) {
    for (int64_t bj = 0; bj < 3; ++bj) {
      float largest = 0.0f;
      for (int64_t r = bi * rows; r < std::min(n, (bi + 1) * rows); ++r) {
        for (int64_t c = bj * cols; c < (bj + 1) * cols; ++c)
          largest = std::max(largest, std::fabs(values.at<float>({r, c})));
      }
      const float scale = weight.scales.at<float>({bi, bj});
      EXPECT_FLOAT_EQ(scale, largest / kE4m3Max);
      for (int64_t r = bi * rows; r < std::min(n, (bi + 1) * rows); ++r) {
        for (int64_t c = bj * cols; c < (bj + 1) * cols; ++c) {
          const float v = values.at<float>({r, c});
          const float bound = std::fabs(v) * 0.0625f + scale * std::ldexp(1.0f, -10);
          ASSERT_LE(std::fabs(back[r * k + c] - v), bound) << r << ", " << c;
        }
      }
    }
  }
  // An all-zero block gets scale 1 and zeros.
  const Weight zeros = quantize_fp8(Tensor::empty({4, 16}, DType::kF32), 4, 16);
  EXPECT_EQ(zeros.scales.at<float>({0, 0}), 1.0f);
  for (const float v : dequantized(zeros))
    EXPECT_EQ(v, 0.0f);
}

// cpu::linear with an FP8 weight is the f32 product with the dequantized weight, exactly; also
// with rows longer than the 2^18 values of a dequantized tile.
TEST(WeightTest, LinearIsTheDequantizedProduct) {
  for (const auto& [rows, cols] : {std::pair{48, 64}, std::pair{3, (1 << 18) + 64}}) {
    const Weight weight = quantize_fp8(random_matrix(rows, cols, 2), 32, 32);
    const std::vector<float> dense_values = dequantized(weight);
    Tensor dense = Tensor::empty({rows, cols}, DType::kF32);
    std::copy(dense_values.begin(), dense_values.end(), dense.data<float>());
    const Tensor x = random_matrix(5, cols, 3);
    Tensor out = Tensor::empty({5, rows}, DType::kF32);
    Tensor expected = Tensor::empty({5, rows}, DType::kF32);
    cpu::linear(x, weight, out);
    cpu::linear(x, dense, expected);
    for (int64_t i = 0; i < out.numel(); ++i)
      ASSERT_EQ(out.data<float>()[i], expected.data<float>()[i]) << i;
  }
}

// Narrowing and stacking keep every row's dequantized values, whether the cut falls on a block
// boundary (scales shared) or inside a block (scales expanded per row).
TEST(WeightTest, NarrowAndStackKeepValues) {
  const Weight a = quantize_fp8(random_matrix(40, 32, 4), 16, 16);
  const Weight b = quantize_fp8(random_matrix(24, 32, 5), 16, 16);
  const std::vector<float> da = dequantized(a);
  const std::vector<float> db = dequantized(b);
  for (const int64_t start : {0, 16, 5}) {
    const Weight part = a.narrow_rows(start, 20);
    EXPECT_EQ(part.block_rows, start % 16 == 0 ? 16 : 1);
    const std::vector<float> dp = dequantized(part);
    for (int64_t i = 0; i < 20 * 32; ++i)
      ASSERT_EQ(dp[i], da[start * 32 + i]) << start;
  }
  // 40 rows are not whole 16-row blocks: the stack's scales go per row.
  const Weight stacked = stack_rows({a, b});
  EXPECT_EQ(stacked.block_rows, 1);
  const Weight aligned = stack_rows({a.narrow_rows(0, 32), b});
  EXPECT_EQ(aligned.block_rows, 16);
  const std::vector<float> ds = dequantized(stacked);
  const std::vector<float> dal = dequantized(aligned);
  for (int64_t i = 0; i < 24 * 32; ++i) {
    ASSERT_EQ(ds[40 * 32 + i], db[i]);
    ASSERT_EQ(dal[32 * 32 + i], db[i]);
  }
  for (int64_t i = 0; i < 32 * 32; ++i) {
    ASSERT_EQ(ds[i], da[i]);
    ASSERT_EQ(dal[i], da[i]);
  }
  // A last part with other row blocks (a per-tensor scale: one block of all its rows) stacks with
  // per-row scales too.
  const Weight whole = quantize_fp8(random_matrix(24, 32, 8), 24, 16);
  const Weight mixed = stack_rows({a.narrow_rows(0, 32), whole});
  EXPECT_EQ(mixed.block_rows, 1);
  const std::vector<float> dm = dequantized(mixed);
  const std::vector<float> dw = dequantized(whole);
  for (int64_t i = 0; i < 24 * 32; ++i)
    ASSERT_EQ(dm[32 * 32 + i], dw[i]);
  EXPECT_TRUE(can_stack_rows({a, b}));
  EXPECT_FALSE(can_stack_rows({a, Weight(random_matrix(8, 32, 6))}));
  EXPECT_FALSE(can_stack_rows({a, quantize_fp8(random_matrix(8, 32, 7), 16, 32)}));
  EXPECT_FALSE(can_stack_rows({a, quantize_fp8(random_matrix(8, 16, 7), 16, 16)}));
}

}  // namespace
}  // namespace pagoda
