#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/ops.h"
#include "ops/rope.h"

namespace pagoda {
namespace {

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = normal(rng);
  return t;
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    cpu::store_float(out.raw_data() + i * out.element_size(), dtype, t.data<float>()[i]);
  }
  return out;
}

// Linear against a double-precision loop, for f32 weights and half weights widened in several
// tiles (K large enough that one tile holds fewer rows than N), or in tiles of one row longer than
// a tile's usual 2^18 values.
TEST(MatmulTest, LinearMatchesReference) {
  std::mt19937 rng(7);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const auto& [m, n, k] :
         {std::tuple{1, 5, 3}, std::tuple{3, 300, 8192}, std::tuple{2, 3, (1 << 18) + 64}}) {
      const Tensor x = random_tensor({m, k}, rng);
      const Tensor w32 = random_tensor({n, k}, rng);
      const Tensor w = to_dtype(w32, dtype);
      Tensor out = Tensor::empty({m, n}, DType::kF32);
      cpu::linear(x, w, out);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double expected = 0;
          for (int64_t p = 0; p < k; ++p) {
            const float wv = cpu::load_float(w.raw_data() + (j * k + p) * w.element_size(), dtype);
            expected += static_cast<double>(x.at<float>({i, p})) * wv;
          }
          ASSERT_NEAR(out.at<float>({i, j}), expected, 1e-3 * std::sqrt(k))
              << dtype_name(dtype) << " m=" << m << " n=" << n << " k=" << k;
        }
      }
    }
  }
}

TEST(OpsTest, RmsNormWithOffset) {
  Tensor x = Tensor::empty({2, 4}, DType::kF32);
  const float values[] = {1, 2, 3, 4, -1, 0, 0, 1};
  for (int i = 0; i < 8; ++i)
    x.data<float>()[i] = values[i];
  Tensor w = Tensor::empty({4}, DType::kF32);
  w.fill(0.5);
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  cpu::rms_norm(x, w, 0.0f, 0.0f, out);
  const float rms = std::sqrt((1 + 4 + 9 + 16) / 4.0f);
  EXPECT_NEAR(out.at<float>({0, 3}), 4 / rms * 0.5f, 1e-6);
  cpu::rms_norm(x, w, 0.0f, 1.0f, out);  // Gemma style: (1 + w)
  EXPECT_NEAR(out.at<float>({1, 0}), -1 / std::sqrt(0.5f) * 1.5f, 1e-6);
}

// x / rms(x) * (w + offset) of one row, in double; w may be undefined (a factor of 1).
std::vector<double> normed_row(const std::vector<double>& x, const Tensor& w, double eps,
                               double offset) {
  double squares = 0;
  for (double v : x)
    squares += v * v;
  const double inverse = 1 / std::sqrt(squares / static_cast<double>(x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double scale = w.defined() ? w.data<float>()[i] + offset : 1.0;
    out[i] = x[i] * inverse * scale;
  }
  return out;
}

// residual = (residual + norm_a(x)) * scale, out = norm_b(residual), against a double loop; with
// a weightless second norm, a (1 + w) first norm, and without the second norm.
TEST(OpsTest, AddNormedMatchesReference) {
  std::mt19937 rng(11);
  const int64_t rows = 3;
  const int64_t dim = 40;
  const Tensor x = random_tensor({rows, dim}, rng);
  const Tensor start = random_tensor({rows, dim}, rng);
  const RmsNormParams x_norm{random_tensor({dim}, rng), 1e-6f, 1.0f};
  for (bool with_out : {true, false}) {
    const Tensor residual = start.clone();
    const Tensor out = with_out ? Tensor::empty({rows, dim}, DType::kF32) : Tensor();
    ops::add_normed(residual, x, x_norm, 0.5f, RmsNormParams{Tensor(), 1e-5f, 0.0f}, out);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(dim);
      for (int64_t i = 0; i < dim; ++i)
        row[i] = x.at<float>({r, i});
      std::vector<double> expected = normed_row(row, x_norm.weight, 1e-6, 1.0);
      for (int64_t i = 0; i < dim; ++i)
        expected[i] = (expected[i] + start.at<float>({r, i})) * 0.5;
      const std::vector<double> expected_out = normed_row(expected, Tensor(), 1e-5, 0.0);
      for (int64_t i = 0; i < dim; ++i) {
        ASSERT_NEAR(residual.at<float>({r, i}), expected[i], 1e-5) << r << ", " << i;
        if (with_out) {
          ASSERT_NEAR(out.at<float>({r, i}), expected_out[i], 1e-5) << r << ", " << i;
        }
      }
    }
  }
}

// Gate, up and output may be column slices of wider rows (as a fused gate/up output, or one
// layer's share of per-layer inputs, is): each element lands where its row's stride puts it.
TEST(OpsTest, GatedActivationOverStridedRows) {
  const int64_t rows = 3, cols = 5;
  const Tensor wide = Tensor::empty({rows, 3 * cols}, DType::kF32);
  for (int64_t i = 0; i < wide.numel(); ++i)
    wide.data<float>()[i] = 0.1f * static_cast<float>(i - 20);
  const Tensor out = Tensor::empty({rows, 2 * cols}, DType::kF32);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = -7.0f;
  cpu::gated_activation(cpu::Activation::kSilu, wide.narrow(1, 0, cols),
                        wide.narrow(1, 2 * cols, cols), out.narrow(1, cols, cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float g = wide.at<float>({r, c});
      const float u = wide.at<float>({r, 2 * cols + c});
      EXPECT_NEAR(out.at<float>({r, cols + c}), g / (1 + std::exp(-g)) * u, 1e-6) << r << "," << c;
      EXPECT_EQ(out.at<float>({r, c}), -7.0f);  // the columns outside the slice stay
    }
  }
}

TEST(OpsTest, GatedActivationsSoftcapLogSoftmax) {
  Tensor gate = Tensor::empty({1, 2}, DType::kF32);
  Tensor up = Tensor::empty({1, 2}, DType::kF32);
  gate.data<float>()[0] = 1.0f;
  gate.data<float>()[1] = -2.0f;
  up.data<float>()[0] = 3.0f;
  up.data<float>()[1] = 0.5f;
  Tensor out = Tensor::empty({1, 2}, DType::kF32);
  cpu::gated_activation(cpu::Activation::kSilu, gate, up, out);
  EXPECT_NEAR(out.at<float>({0, 0}), 1 / (1 + std::exp(-1.0f)) * 3, 1e-6);
  cpu::gated_activation(cpu::Activation::kGeluTanh, gate, up, out);
  const float g = -2.0f;
  const float gelu = 0.5f * g * (1 + std::tanh(0.7978845608f * (g + 0.044715f * g * g * g)));
  EXPECT_NEAR(out.at<float>({0, 1}), gelu * 0.5f, 1e-6);

  Tensor logits = Tensor::empty({1, 3}, DType::kF32);
  logits.data<float>()[0] = 100;
  logits.data<float>()[1] = -100;
  logits.data<float>()[2] = 0;
  cpu::softcap_in_place(logits, 30.0f);
  EXPECT_NEAR(logits.at<float>({0, 0}), 30 * std::tanh(100.0f / 30), 1e-5);
  cpu::log_softmax(logits, logits);
  double total = 0;
  for (int i = 0; i < 3; ++i)
    total += std::exp(logits.at<float>({0, i}));
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(OpsTest, EmbeddingRejectsIdsOutsideTheVocabulary) {
  Tensor table = Tensor::empty({4, 2}, DType::kBF16);
  table.fill(1.5);
  Tensor out = Tensor::empty({2, 2}, DType::kF32);
  cpu::embedding(table, {3, 0}, out);
  EXPECT_EQ(out.at<float>({0, 1}), 1.5f);
  EXPECT_THROW(cpu::embedding(table, {4, 0}, out), Error);
  EXPECT_THROW(cpu::embedding(table, {-1, 0}, out), Error);
}

TEST(RopeTest, RotatesPairsByPosition) {
  const RopeParams params{.head_size = 8, .rotary_dim = 4, .theta = 100.0};
  const std::vector<float> inverse = rope_inverse_frequencies(params);
  ASSERT_EQ(inverse.size(), 2u);
  EXPECT_FLOAT_EQ(inverse[1], 1.0f / 10.0f);  // 100^(-2/4)
  Tensor x = Tensor::empty({1, 1, 8}, DType::kF32);
  for (int i = 0; i < 8; ++i)
    x.data<float>()[i] = static_cast<float>(i + 1);
  apply_rope_cpu(inverse, params.rotary_dim, {3}, x);
  // Pair (1, 3) rotates by 3 * 0.1 rad; dims past the rotary part are untouched.
  EXPECT_NEAR(x.at<float>({0, 0, 1}), 2 * std::cos(0.3f) - 4 * std::sin(0.3f), 1e-6);
  EXPECT_NEAR(x.at<float>({0, 0, 3}), 4 * std::cos(0.3f) + 2 * std::sin(0.3f), 1e-6);
  EXPECT_EQ(x.at<float>({0, 0, 5}), 6.0f);
}

TEST(RopeTest, Llama3ScalingBands) {
  RopeParams params{.head_size = 64, .rotary_dim = 64, .theta = 500000.0};
  const std::vector<float> plain = rope_inverse_frequencies(params);
  params.scaling = RopeScaling::kLlama3;
  params.factor = 8;
  params.low_freq_factor = 1;
  params.high_freq_factor = 4;
  params.original_max_position = 8192;
  const std::vector<float> scaled = rope_inverse_frequencies(params);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(scaled[i], plain[i] / 8);
      ++divided;
    } else {
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

// The GPU's centroid head holds a row's centroid scores and hidden state in shared memory: shapes
// past it are refused when the assistant loads, not at its first draft.
TEST(OpsTest, CentroidHeadShapesAreCheckedForTheDevice) {
  EXPECT_NO_THROW(ops::check_centroid_head(2048, 2560, Device::cuda(0)));  // Gemma 4's assistant
  EXPECT_NO_THROW(ops::check_centroid_head(16384, 100, Device::cpu()));    // the CPU has no limit
  EXPECT_THROW(ops::check_centroid_head(16384, 2560, Device::cuda(0)), Error);
  EXPECT_THROW(ops::check_centroid_head(2048, 16384, Device::cuda(0)), Error);
  EXPECT_THROW(ops::check_centroid_head(2048, 100, Device::cuda(0)), Error);  // not a multiple of 8
}

}  // namespace
}  // namespace pagoda
