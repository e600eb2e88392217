// Each CUDA op against the CPU reference on the same (dtype-rounded) inputs, table-driven over
// shapes, with outputs poisoned with NaN first so an unwritten element fails the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/cuda/ops.h"
#include "ops/rope.h"

namespace pagoda {
namespace {

constexpr DType kActivationDtypes[] = {DType::kF32, DType::kBF16};
constexpr int64_t kRows[] = {1, 3, 64};
constexpr int64_t kDims[] = {64, 128, 2560, 4096, 100};  // 100: the unvectorized fallback

// bf16 activations carry 8 bits of mantissa; f32 differs from the CPU only in summation order.
double tolerance(DType dtype) {
  return dtype == DType::kBF16 ? 1e-2 : 1e-5;
}

// A host f32 tensor of normal(0, scale) values.
Tensor random_tensor(const Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = normal(rng);
  return t;
}

// A contiguous host copy of the host tensor `t` in `dtype`, rounded as the host conversions do.
Tensor cast(const Tensor& t, DType dtype) {
  const Tensor src = t.contiguous();
  Tensor out = Tensor::empty(src.shape(), dtype);
  for (int64_t i = 0; i < src.numel(); ++i) {
    const float v = cpu::load_float(src.raw_data() + i * src.element_size(), src.dtype());
    cpu::store_float(out.raw_data() + i * out.element_size(), dtype, v);
  }
  return out;
}

// `t` rounded to `dtype` and widened back: the values the device sees, as a CPU reference input.
Tensor rounded(const Tensor& t, DType dtype) {
  return cast(cast(t, dtype), DType::kF32);
}

Tensor to_cuda(const Tensor& t, DType dtype) {
  return cast(t, dtype).to(Device::cuda());
}

Tensor to_host_f32(const Tensor& t) {
  return cast(t.to(Device::cpu()), DType::kF32);
}

// A device tensor whose every element is NaN until an op writes it.
Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  t.fill(NAN);
  return t;
}

// ‖out − ref‖ / ‖ref‖ over host f32 tensors of one shape; infinity when out holds a NaN.
double relative_error(const Tensor& out, const Tensor& ref) {
  EXPECT_EQ(out.shape(), ref.shape());
  const Tensor a = out.contiguous();
  const Tensor b = ref.contiguous();
  double diff = 0.0;
  double norm = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i];
    const double y = b.data<float>()[i];
    if (std::isnan(x)) return INFINITY;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

TEST(CudaOpsTest, EmbeddingMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(1);
  const int64_t vocab = 50;
  for (DType table_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType dtype : kActivationDtypes) {
      for (int64_t hidden : {int64_t{64}, int64_t{2560}, int64_t{100}}) {
        for (int64_t tokens : kRows) {
          const Tensor table = cast(random_tensor({vocab, hidden}, rng), table_dtype);
          std::vector<int32_t> ids(tokens);
          for (int32_t& id : ids)
            id = static_cast<int32_t>(rng() % vocab);
          ids[0] = tokens > 1 ? -1 : ids[0];  // outside the vocabulary: a zero row
          ids.back() = tokens > 2 ? static_cast<int32_t>(vocab) : ids.back();
          std::vector<int32_t> valid_ids = ids;
          for (int32_t& id : valid_ids)
            id = (id < 0 || id >= vocab) ? 0 : id;
          Tensor ref = Tensor::empty({tokens, hidden}, DType::kF32);
          cpu::embedding(table, valid_ids, ref);
          const float scale = 1.5f;
          for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t h = 0; h < hidden; ++h) {
              float& v = ref.at<float>({t, h});
              v = ids[t] == valid_ids[t] ? v * scale : 0.0f;
            }
          }
          Tensor ids_host = Tensor::empty({tokens}, DType::kI32);
          std::copy(ids.begin(), ids.end(), ids_host.data<int32_t>());
          const Tensor out = poisoned({tokens, hidden}, dtype);
          cuda::embedding(table.to(Device::cuda()), ids_host.to(Device::cuda()), scale, out);
          EXPECT_LE(relative_error(to_host_f32(out), rounded(ref, dtype)), tolerance(dtype))
              << dtype_name(table_dtype) << " -> " << dtype_name(dtype) << " hidden " << hidden
              << " tokens " << tokens;
        }
      }
    }
  }
}

// Weights: bf16 with no offset (Llama), f32 with offset 1 (Gemma 1-3), none (a scale-free norm).
TEST(CudaOpsTest, RmsNormMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(2);
  const std::tuple<DType, float, bool> weights[] = {
      {DType::kBF16, 0.0f, true}, {DType::kF32, 1.0f, true}, {DType::kBF16, 0.0f, false}};
  for (DType dtype : kActivationDtypes) {
    for (int64_t rows : kRows) {
      for (int64_t dim : kDims) {
        for (const auto& [weight_dtype, offset, has_weight] : weights) {
          const Tensor x = rounded(random_tensor({rows, dim}, rng, 3.0f), dtype);
          const Tensor w = has_weight ? cast(random_tensor({dim}, rng), weight_dtype) : Tensor();
          Tensor ref = Tensor::empty({rows, dim}, DType::kF32);
          cpu::rms_norm(x, w, 1e-6f, offset, ref);
          const Tensor out = poisoned({rows, dim}, dtype);
          cuda::rms_norm(to_cuda(x, dtype), has_weight ? w.to(Device::cuda()) : Tensor(), 1e-6f,
                         offset, out);
          EXPECT_LE(relative_error(to_host_f32(out), ref), tolerance(dtype))
              << dtype_name(dtype) << " rows " << rows << " dim " << dim << " weight "
              << (has_weight ? dtype_name(weight_dtype) : "none");
        }
      }
    }
  }
}

// Per-head norms run in place on strided views: rows of a wider buffer, the rest left untouched.
TEST(CudaOpsTest, RmsNormInPlaceOnStridedRows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(3);
  for (DType dtype : kActivationDtypes) {
    for (int64_t dim : {int64_t{128}, int64_t{256}, int64_t{100}, int64_t{4096}}) {
      const Tensor wide = rounded(random_tensor({40, 3 * dim}, rng), dtype);
      const Tensor w = cast(random_tensor({dim}, rng), DType::kBF16);
      Tensor ref = wide.clone();
      const Tensor ref_rows = ref.narrow(1, dim, dim).contiguous();
      cpu::rms_norm(ref_rows, w, 1e-6f, 0.0f, ref_rows);
      ref.narrow(1, dim, dim).copy_from(ref_rows);
      const Tensor device = to_cuda(wide, dtype);
      const Tensor rows = device.narrow(1, dim, dim);
      cuda::rms_norm(rows, w.to(Device::cuda()), 1e-6f, 0.0f, rows);
      EXPECT_LE(relative_error(to_host_f32(device), ref), tolerance(dtype))
          << dtype_name(dtype) << " dim " << dim;
    }
  }
}

TEST(CudaOpsTest, AddRmsNormMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(4);
  for (DType dtype : kActivationDtypes) {
    for (int64_t rows : kRows) {
      for (int64_t dim : kDims) {
        const Tensor residual = rounded(random_tensor({rows, dim}, rng), dtype);
        const Tensor x = rounded(random_tensor({rows, dim}, rng), dtype);
        const Tensor w = cast(random_tensor({dim}, rng), DType::kBF16);
        // The device normalises the sum as stored, rounded to the activation dtype.
        Tensor sum = residual.clone();
        cpu::add_in_place(sum, x);
        sum = rounded(sum, dtype);
        Tensor ref = Tensor::empty({rows, dim}, DType::kF32);
        cpu::rms_norm(sum, w, 1e-5f, 0.0f, ref);
        const Tensor device_residual = to_cuda(residual, dtype);
        const Tensor out = poisoned({rows, dim}, dtype);
        cuda::add_rms_norm(device_residual, to_cuda(x, dtype), w.to(Device::cuda()), 1e-5f, 0.0f,
                           out);
        EXPECT_LE(relative_error(to_host_f32(device_residual), sum), tolerance(dtype))
            << dtype_name(dtype) << " residual, rows " << rows << " dim " << dim;
        EXPECT_LE(relative_error(to_host_f32(out), ref), tolerance(dtype))
            << dtype_name(dtype) << " rows " << rows << " dim " << dim;
      }
    }
  }
}

// residual = (residual + norm_a(x)) * scale; out = norm_b(residual), against the CPU ops in
// sequence, each result rounded to the activation dtype as the device rounds it. Also without the
// second norm, and with a weightless first norm.
TEST(CudaOpsTest, AddNormedMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(12);
  for (DType dtype : kActivationDtypes) {
    for (int64_t rows : kRows) {
      for (int64_t dim : kDims) {
        for (bool with_out : {true, false}) {
          const Tensor residual = rounded(random_tensor({rows, dim}, rng, 4.0f), dtype);
          const Tensor x = rounded(random_tensor({rows, dim}, rng), dtype);
          const Tensor w_a = cast(random_tensor({dim}, rng), DType::kBF16);
          const Tensor w_b = cast(random_tensor({dim}, rng), DType::kBF16);
          const RmsNormParams norm_a{with_out ? w_a : Tensor(), 1e-6f, 0.0f};
          const RmsNormParams norm_b{w_b, 1e-5f, 1.0f};
          const float scale = 0.75f;

          Tensor normed = Tensor::empty({rows, dim}, DType::kF32);
          cpu::rms_norm(x, norm_a.weight, norm_a.eps, norm_a.weight_offset, normed);
          Tensor sum = residual.clone();
          cpu::add_in_place(sum, rounded(normed, dtype));
          sum = rounded(sum, dtype);
          for (int64_t i = 0; i < sum.numel(); ++i)
            sum.data<float>()[i] *= scale;
          sum = rounded(sum, dtype);
          Tensor ref = Tensor::empty({rows, dim}, DType::kF32);
          cpu::rms_norm(sum, w_b, norm_b.eps, norm_b.weight_offset, ref);

          const Tensor device_residual = to_cuda(residual, dtype);
          const Tensor device_x = to_cuda(x, dtype);
          const Tensor out = with_out ? poisoned({rows, dim}, dtype) : Tensor();
          const RmsNormParams device_a{with_out ? w_a.to(Device::cuda()) : Tensor(), norm_a.eps,
                                       norm_a.weight_offset};
          const RmsNormParams device_b{w_b.to(Device::cuda()), norm_b.eps, norm_b.weight_offset};
          cuda::add_normed(device_residual, device_x, device_a, scale, device_b, out);
          const std::string what = std::string(dtype_name(dtype)) + " rows " +
                                   std::to_string(rows) + " dim " + std::to_string(dim) +
                                   (with_out ? "" : " without out");
          EXPECT_LE(relative_error(to_host_f32(device_residual), sum), tolerance(dtype))
              << what << ": residual";
          EXPECT_EQ(relative_error(to_host_f32(device_x), x), 0.0) << what << ": x changed";
          if (with_out) {
            EXPECT_LE(relative_error(to_host_f32(out), ref), tolerance(dtype)) << what;
          }
        }
      }
    }
  }
}

// add / scale / softcap in place, over contiguous tensors and over a misaligned view (offset by
// one element), which takes the scalar path.
TEST(CudaOpsTest, InPlaceElementwiseMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  for (DType dtype : kActivationDtypes) {
    for (int64_t rows : kRows) {
      for (int64_t dim : kDims) {
        for (int64_t offset : {0, 1}) {
          const int64_t n = rows * dim;
          const Tensor x = rounded(random_tensor({n}, rng, 40.0f), dtype);
          const Tensor y = rounded(random_tensor({n}, rng), dtype);
          Tensor ref = x.clone();
          cpu::add_in_place(ref.view({rows, dim}), y.view({rows, dim}));
          for (int64_t i = 0; i < n; ++i)
            ref.data<float>()[i] *= 0.5f;
          cpu::softcap_in_place(ref, 30.0f);
          const Tensor buffer = poisoned({n + offset}, dtype);
          const Tensor device_x = buffer.narrow(0, offset, n);
          device_x.copy_from(cast(x, dtype).to(Device::cuda()));
          const Tensor device_y = poisoned({n + offset}, dtype).narrow(0, offset, n);
          device_y.copy_from(cast(y, dtype).to(Device::cuda()));
          cuda::add_in_place(device_x, device_y);
          cuda::scale_in_place(device_x, 0.5f);
          cuda::softcap_in_place(device_x, 30.0f);
          EXPECT_LE(relative_error(to_host_f32(device_x), ref), tolerance(dtype))
              << dtype_name(dtype) << " n " << n << " offset " << offset;
        }
      }
    }
  }
}

// gate and up are the two halves of a fused [T, 2I] projection, as the MLP produces them.
TEST(CudaOpsTest, GatedActivationMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(6);
  for (Activation activation : {Activation::kSilu, Activation::kGeluTanh}) {
    for (DType dtype : kActivationDtypes) {
      for (int64_t rows : kRows) {
        for (int64_t dim : kDims) {
          const Tensor fused = rounded(random_tensor({rows, 2 * dim}, rng, 2.0f), dtype);
          const Tensor gate = fused.narrow(1, 0, dim).contiguous();
          const Tensor up = fused.narrow(1, dim, dim).contiguous();
          Tensor ref = Tensor::empty({rows, dim}, DType::kF32);
          cpu::gated_activation(activation, gate, up, ref);
          const Tensor device = to_cuda(fused, dtype);
          const Tensor out = poisoned({rows, dim}, dtype);
          cuda::gated_activation(activation, device.narrow(1, 0, dim), device.narrow(1, dim, dim),
                                 out);
          EXPECT_LE(relative_error(to_host_f32(out), ref), tolerance(dtype))
              << dtype_name(dtype) << " activation " << static_cast<int>(activation) << " rows "
              << rows << " dim " << dim;
        }
      }
    }
  }
}

// q inside a fused [T, q_heads + 2 * kv_heads, head_size] buffer, positions up to 100000, full and
// partial rotary dims, and a head whose half (50) is not a multiple of the vector width. Rotated
// alone (rope), and normalised per head first (norm_rope: with a weight and a (1 + w) offset,
// without a weight, and without rotation), the norm's output rounded as the device stores it.
TEST(CudaOpsTest, RopeAndNormRopeMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  struct Case {
    int64_t heads, head_size, rotary_dim;
    double theta;
  };
  const Case cases[] = {{4, 64, 64, 10000.0},   {8, 128, 128, 500000.0},  {3, 256, 64, 1000000.0},
                        {2, 100, 100, 10000.0}, {2, 512, 128, 1000000.0}, {5, 256, 0, 0.0}};
  enum class Norm { kNone, kWeighted, kWeightless };
  for (DType dtype : kActivationDtypes) {
    for (int64_t tokens : kRows) {
      for (const Case& c : cases) {
        for (Norm norm : {Norm::kNone, Norm::kWeighted, Norm::kWeightless}) {
          if (c.rotary_dim == 0 && norm == Norm::kNone) continue;
          std::vector<float> frequencies;
          if (c.rotary_dim > 0) {
            RopeParams params;
            params.head_size = c.head_size;
            params.rotary_dim = c.rotary_dim;
            params.theta = c.theta;
            frequencies = rope_inverse_frequencies(params);
          }
          std::vector<int64_t> positions(tokens);
          for (int64_t& p : positions)
            p = static_cast<int64_t>(rng() % 100001);
          positions.back() = 100000;
          const int64_t slots = c.heads + 2;
          const Tensor fused =
              rounded(random_tensor({tokens, slots, c.head_size}, rng, 3.0f), dtype);
          const Tensor weight = cast(random_tensor({c.head_size}, rng), DType::kBF16);
          const RmsNormParams params{norm == Norm::kWeighted ? weight : Tensor(), 1e-6f,
                                     norm == Norm::kWeighted ? 1.0f : 0.0f};
          Tensor ref = fused.clone();
          Tensor q = ref.narrow(1, 0, c.heads).contiguous();
          if (norm != Norm::kNone) {
            const Tensor rows = q.view({tokens * c.heads, c.head_size});
            cpu::rms_norm(rows, params.weight, params.eps, params.weight_offset, rows);
            q = rounded(q, dtype);
          }
          if (c.rotary_dim > 0) apply_rope_cpu(frequencies, c.rotary_dim, positions, q);
          ref.narrow(1, 0, c.heads).copy_from(q);

          Tensor frequencies_host = Tensor::empty({c.rotary_dim / 2}, DType::kF32);
          std::copy(frequencies.begin(), frequencies.end(), frequencies_host.data<float>());
          const Tensor device_frequencies =
              c.rotary_dim > 0 ? frequencies_host.to(Device::cuda()) : Tensor();
          Tensor positions_host = Tensor::empty({tokens}, DType::kI64);
          std::copy(positions.begin(), positions.end(), positions_host.data<int64_t>());
          const Tensor device = to_cuda(fused, dtype);
          const Tensor device_positions = positions_host.to(Device::cuda());
          const Tensor device_q = device.narrow(1, 0, c.heads);
          if (norm == Norm::kNone) {
            cuda::rope(device_frequencies, c.rotary_dim, device_positions, device_q);
          } else {
            const RmsNormParams device_params{
                params.weight.defined() ? params.weight.to(Device::cuda()) : Tensor(), params.eps,
                params.weight_offset};
            cuda::norm_rope(device_params, device_frequencies, c.rotary_dim, device_positions,
                            device_q);
          }
          EXPECT_LE(relative_error(to_host_f32(device), ref), tolerance(dtype))
              << dtype_name(dtype) << " tokens " << tokens << " head " << c.head_size << " rotary "
              << c.rotary_dim << " norm " << static_cast<int>(norm);
        }
      }
    }
  }
}

// A layer's q, k and v in one launch (Gemma 4's shape: q and k normalised with their weights and
// rotated, v normalised without a weight or rotation; v narrower here) write exactly what three
// launches do, each tensor a strided view of one fused buffer.
TEST(CudaOpsTest, NormRopeOfSeveralTensorsMatchesOneAtATime) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(17);
  RopeParams rope;
  rope.head_size = 256;
  rope.rotary_dim = 64;
  rope.theta = 1000000.0;
  const std::vector<float> frequencies = rope_inverse_frequencies(rope);
  Tensor frequencies_host = Tensor::empty({32}, DType::kF32);
  std::copy(frequencies.begin(), frequencies.end(), frequencies_host.data<float>());
  const Tensor device_frequencies = frequencies_host.to(Device::cuda());
  const auto device_norm = [&](bool weighted, float offset) {
    const Tensor w = cast(random_tensor({256}, rng), DType::kBF16);
    return RmsNormParams{weighted ? w.to(Device::cuda()) : Tensor(), 1e-6f, offset};
  };
  const RmsNormParams q_norm = device_norm(true, 0.0f);
  const RmsNormParams k_norm = device_norm(true, 1.0f);
  const RmsNormParams v_norm = device_norm(false, 0.0f);
  for (DType dtype : kActivationDtypes) {
    for (int64_t tokens : kRows) {
      std::vector<int64_t> positions(tokens);
      for (int64_t& p : positions)
        p = static_cast<int64_t>(rng() % 100001);
      Tensor positions_host = Tensor::empty({tokens}, DType::kI64);
      std::copy(positions.begin(), positions.end(), positions_host.data<int64_t>());
      const Tensor device_positions = positions_host.to(Device::cuda());
      // [T, 8 q heads + 2 k heads of 256 | 2 v heads of 128 | 16 spare].
      const int64_t row = 10 * 256 + 2 * 128 + 16;
      const Tensor fused = to_cuda(random_tensor({tokens, row}, rng, 3.0f), dtype);
      const Tensor once = fused.clone();
      const auto views = [&](const Tensor& t) {
        return std::array<Tensor, 3>{t.as_strided({tokens, 8, 256}, {row, 256, 1}, 0),
                                     t.as_strided({tokens, 2, 256}, {row, 256, 1}, 8 * 256),
                                     t.as_strided({tokens, 2, 128}, {row, 128, 1}, 10 * 256)};
      };
      const std::array<Tensor, 3> apart = views(fused);
      const std::array<Tensor, 3> together = views(once);
      cuda::norm_rope(q_norm, device_frequencies, 64, device_positions, apart[0]);
      cuda::norm_rope(k_norm, device_frequencies, 64, device_positions, apart[1]);
      cuda::norm_rope(v_norm, device_frequencies, 0, device_positions, apart[2]);
      const NormRopePart parts[] = {
          {together[0], q_norm, true}, {together[1], k_norm, true}, {together[2], v_norm, false}};
      cuda::norm_rope(parts, device_frequencies, 64, device_positions);
      const Tensor expected = to_host_f32(fused);
      const Tensor got = to_host_f32(once);
      EXPECT_EQ(
          std::memcmp(expected.data<float>(), got.data<float>(), expected.numel() * sizeof(float)),
          0)
          << dtype_name(dtype) << " tokens " << tokens;
    }
  }
  // Parts of different tokens or dtypes are refused.
  const Tensor a = Tensor::empty({2, 1, 256}, DType::kBF16, Device::cuda());
  const Tensor b = Tensor::empty({3, 1, 256}, DType::kBF16, Device::cuda());
  const Tensor positions = Tensor::empty({3}, DType::kI64, Device::cuda());
  const NormRopePart mixed[] = {{a, q_norm, true}, {b, k_norm, true}};
  EXPECT_THROW(cuda::norm_rope(mixed, device_frequencies, 64, positions), InternalError);
}

// The matrix-vector product with the gated activation in its epilogue writes exactly what the
// product and then the activation kernel write, with `up` strided rows of a wider tensor (Gemma
// 4's per-layer inputs); and refuses an output of another shape.
TEST(CudaOpsTest, GatedGemvMatchesGemvThenActivation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(19);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{256, 2560}, {1000, 200}}) {
    const Tensor w = to_cuda(random_tensor({n, k}, rng), DType::kBF16);
    for (int64_t m : {1, 3}) {
      const Tensor x = to_cuda(random_tensor({m, k}, rng), DType::kBF16);
      const Tensor wide = to_cuda(random_tensor({m, 3 * n}, rng), DType::kBF16);
      const Tensor up = wide.narrow(1, n, n);
      for (Activation activation : {Activation::kSilu, Activation::kGeluTanh}) {
        const Tensor apart = poisoned({m, n}, DType::kBF16);
        cuda::gemv(x, w, apart);
        cuda::gated_activation(activation, apart, up, apart);
        const Tensor together = poisoned({m, n}, DType::kBF16);
        cuda::gated_gemv(x, w, activation, up, together);
        const Tensor expected = to_host_f32(apart);
        const Tensor got = to_host_f32(together);
        EXPECT_EQ(std::memcmp(expected.data<float>(), got.data<float>(),
                              expected.numel() * sizeof(float)),
                  0)
            << "n " << n << " k " << k << " m " << m << " activation "
            << static_cast<int>(activation);
      }
      EXPECT_THROW(cuda::gated_gemv(x, w, Activation::kSilu, up.narrow(1, 0, n - 1),
                                    poisoned({m, n - 1}, DType::kBF16)),
                   InternalError);
    }
  }
}

// Whether two device tensors hold the same bytes (as f32 copies on the host).
bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = to_host_f32(a);
  const Tensor y = to_host_f32(b);
  return x.shape() == y.shape() &&
         std::memcmp(x.data<float>(), y.data<float>(), x.numel() * sizeof(float)) == 0;
}

// The matrix-vector product of a stacked [gate; up] weight whose warps pair each gate row with its
// up row writes exactly what the product of the whole weight and then the gated activation write,
// for bf16 and FP8 weights (FP8 scale blocks that the gate and up halves share at n = 1000).
TEST(CudaOpsTest, PairedGatedGemvMatchesGemvThenActivation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(31);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{1024, 512}, {1000, 2048}, {7, 64}}) {
    const Tensor host_w = random_tensor({2 * n, k}, rng, 0.05f);
    const Weight bf16_weight(to_cuda(host_w, DType::kBF16));
    const Weight fp8_weight = quantize_fp8(host_w, 128, 128).to(Device::cuda(0));
    for (int64_t m : {1, 3}) {
      const Tensor x = to_cuda(random_tensor({m, k}, rng), DType::kBF16);
      for (const Weight* weight : {&bf16_weight, &fp8_weight}) {
        for (Activation activation : {Activation::kSilu, Activation::kGeluTanh}) {
          const Tensor both = poisoned({m, 2 * n}, DType::kBF16);
          if (weight->quantized()) {
            cuda::fp8_gemv(x, *weight, both);
          } else {
            cuda::gemv(x, weight->values, both);
          }
          const Tensor apart = poisoned({m, n}, DType::kBF16);
          cuda::gated_activation(activation, both.narrow(1, 0, n), both.narrow(1, n, n), apart);
          const Tensor together = poisoned({m, n}, DType::kBF16);
          if (weight->quantized()) {
            cuda::fp8_paired_gemv(x, *weight, activation, together);
          } else {
            cuda::paired_gemv(x, weight->values, activation, together);
          }
          EXPECT_TRUE(same_bytes(apart, together))
              << "n " << n << " k " << k << " m " << m << " fp8 " << weight->quantized()
              << " activation " << static_cast<int>(activation);
          EXPECT_EQ(cuda::paired_gated_applies(x, *weight, together),
                    m == 1 && cuda::fused_launches());
        }
      }
    }
  }
  const Tensor x = to_cuda(random_tensor({1, 64}, rng), DType::kBF16);
  const Weight odd(to_cuda(random_tensor({7, 64}, rng), DType::kBF16));
  EXPECT_FALSE(cuda::paired_gated_applies(x, odd, poisoned({1, 3}, DType::kBF16)));
  EXPECT_THROW(cuda::paired_gemv(x, odd.values, Activation::kSilu, poisoned({1, 3}, DType::kBF16)),
               InternalError);
}

// A weight, its scales or an output left on the host is refused, not read as device memory (the
// matrix-vector paths take raw pointers).
TEST(CudaOpsTest, LinearRefusesTensorsOnAnotherDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(37);
  const Tensor host_w = random_tensor({256, 128}, rng);
  const Tensor x = to_cuda(random_tensor({1, 128}, rng), DType::kBF16);
  const Tensor out = poisoned({1, 256}, DType::kBF16);
  const Weight device_w(to_cuda(host_w, DType::kBF16));
  EXPECT_THROW(cuda::linear(x, Weight(cast(host_w, DType::kBF16)), out), InternalError);
  EXPECT_THROW(cuda::linear(x, device_w, Tensor::empty({1, 256}, DType::kBF16)), InternalError);
  const Weight host_fp8 = quantize_fp8(host_w, 128, 128);
  EXPECT_THROW(cuda::linear(x, host_fp8, out), InternalError);
  Weight mixed = host_fp8.to(Device::cuda(0));
  mixed.scales = host_fp8.scales;
  EXPECT_THROW(cuda::linear(x, mixed, out), InternalError);
  cuda::linear(x, device_w, out);  // the same operands, all on the device
}

// bf16 inputs against an f32 product of the same rounded values. A bf16 output carries its own
// rounding (about 1e-3 relative); an f32 output differs only in summation order. Each shape runs
// twice, the second time through the cached plan, poisoned again in between.
TEST(CudaOpsTest, LinearMatchesCpuAndWritesEveryElement) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(8);
  for (int64_t n : {128, 4096, 1000}) {
    for (int64_t k : {64, 4096, 200}) {
      const Tensor w = rounded(random_tensor({n, k}, rng), DType::kBF16);
      const Tensor device_w = to_cuda(w, DType::kBF16);
      for (int64_t m : {1, 7, 64, 300}) {
        const Tensor x = rounded(random_tensor({m, k}, rng), DType::kBF16);
        Tensor ref = Tensor::empty({m, n}, DType::kF32);
        cpu::linear(x, w, ref);
        const Tensor device_x = to_cuda(x, DType::kBF16);
        for (DType out_dtype : kActivationDtypes) {
          const double limit = out_dtype == DType::kBF16 ? 2e-3 : 1e-4;
          for (int run = 0; run < 2; ++run) {
            const Tensor out = poisoned({m, n}, out_dtype);
            cuda::linear(device_x, device_w, out);
            EXPECT_LE(relative_error(to_host_f32(out), ref), limit)
                << "M " << m << " N " << n << " K " << k << " out " << dtype_name(out_dtype)
                << " run " << run;
          }
        }
      }
    }
  }
}

// The matrix-vector kernels themselves (linear() takes one only where it times faster): CUDA
// cores for 1 to kMaxGemvRows rows, tensor cores for 1 to kMaxMmaGemvRows, with a last block of
// weight rows part empty (N 1001, 33, 17) and K not a multiple of their unrolled steps: K's four
// parts uneven (2056) or some of them empty (200).
TEST(CudaOpsTest, GemvMatchesCpuAndWritesEveryElement) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(11);
  for (const auto& [n, k] :
       {std::pair{4096, 4096}, std::pair{1001, 14336}, std::pair{33, 2056}, std::pair{17, 200}}) {
    const Tensor w = rounded(random_tensor({n, k}, rng), DType::kBF16);
    const Tensor device_w = to_cuda(w, DType::kBF16);
    for (int64_t m = 1; m <= cuda::kMaxMmaGemvRows; ++m) {
      const Tensor x = rounded(random_tensor({m, k}, rng), DType::kBF16);
      Tensor ref = Tensor::empty({m, n}, DType::kF32);
      cpu::linear(x, w, ref);
      const Tensor device_x = to_cuda(x, DType::kBF16);
      for (DType out_dtype : kActivationDtypes) {
        const auto check = [&](auto kernel, const char* name) {
          const Tensor out = poisoned({m, n}, out_dtype);
          kernel(device_x, device_w, out);
          EXPECT_LE(relative_error(to_host_f32(out), ref), out_dtype == DType::kBF16 ? 4e-3 : 1e-4)
              << name << " M " << m << " N " << n << " K " << k;
        };
        const Tensor probe = poisoned({m, n}, out_dtype);
        ASSERT_EQ(cuda::gemv_applies(device_x, device_w, probe), m <= cuda::kMaxGemvRows);
        ASSERT_TRUE(cuda::mma_gemv_applies(device_x, device_w, probe));
        if (m <= cuda::kMaxGemvRows) check(cuda::gemv, "gemv");
        check(cuda::mma_gemv, "mma gemv");
      }
    }
  }
  // Past its row limit the tensor-core kernel does not apply, and refuses to run.
  const Tensor x =
      to_cuda(Tensor::empty({cuda::kMaxMmaGemvRows + 1, 64}, DType::kF32), DType::kBF16);
  const Tensor w = to_cuda(Tensor::empty({16, 64}, DType::kF32), DType::kBF16);
  const Tensor out = poisoned({cuda::kMaxMmaGemvRows + 1, 16}, DType::kF32);
  EXPECT_FALSE(cuda::mma_gemv_applies(x, w, out));
  EXPECT_THROW(cuda::mma_gemv(x, w, out), InternalError);
}

// FP8 weights against the product with the dequantized weight, computed on the host: the matrix-
// vector kernels (CUDA cores, and tensor cores where the blocks allow) for 1 to kMaxFp8GemvRows
// rows, and the dequantized bf16 copy through cuBLASLt for any, in 128 x 128 blocks, per-row groups
// (1 x 128) and one scale per tensor, with partial blocks (N and K not multiples of 128) and K's
// four parts uneven. Row 0 of each weight holds one large value and the rest 2^-10 of the usual, so
// its first 128 columns are e4m3 subnormals, which must not be flushed.
TEST(CudaOpsTest, Fp8LinearMatchesTheDequantizedProduct) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(17);
  int64_t mma_runs = 0;
  for (const auto& [n, k] : {std::pair{4096, 4096}, std::pair{1000, 2064}, std::pair{1000, 2048},
                             std::pair{33, 14336}, std::pair{17, 208}}) {
    const Tensor w = random_tensor({n, k}, rng);
    w.data<float>()[0] = 100.0f;
    for (int64_t c = 1; c < k; ++c)
      w.data<float>()[c] *= 0x1p-10f;
    for (const auto& [block_rows, block_cols] :
         {std::pair<int64_t, int64_t>{128, 128}, std::pair<int64_t, int64_t>{1, 128},
          std::pair<int64_t, int64_t>{n, k}}) {
      const Weight host = quantize_fp8(w, block_rows, block_cols);
      int subnormal = 0;  // in row 0's first group
      for (int64_t c = 0; c < 128; ++c)
        subnormal += (host.values.data<uint8_t>()[c] & 0x78) == 0;
      ASSERT_GT(subnormal, 100);
      const Weight device = host.to(Device::cuda(0));
      for (int64_t m : {1, 2, 3, 5, 8, 9, 64}) {
        const Tensor x = rounded(random_tensor({m, k}, rng), DType::kBF16);
        Tensor ref = Tensor::empty({m, n}, DType::kF32);
        cpu::linear(x, host, ref);
        const Tensor device_x = to_cuda(x, DType::kBF16);
        for (DType out_dtype : kActivationDtypes) {
          const auto check = [&](auto path, double limit, const char* name) {
            const Tensor out = poisoned({m, n}, out_dtype);
            path(device_x, device, out);
            EXPECT_LE(relative_error(to_host_f32(out), ref), limit)
                << name << ": M " << m << " N " << n << " K " << k << " blocks " << block_rows
                << " x " << block_cols;
          };
          const bool bf16_out = out_dtype == DType::kBF16;
          if (m <= cuda::kMaxFp8GemvRows) check(cuda::fp8_gemv, bf16_out ? 4e-3 : 1e-4, "gemv");
          // x rounded to f16 on the tensor cores: 2^-11 relative per element.
          if (cuda::fp8_mma_gemv_applies(device_x, device)) {
            ++mma_runs;
            check(cuda::fp8_mma_gemv, bf16_out ? 4e-3 : 1e-3, "mma gemv");
          }
          check(cuda::fp8_dequantized_linear, 4e-3, "dequantized");  // weight rounded to bf16
        }
      }
    }
  }
  EXPECT_GT(mma_runs, 0);  // 128 x 128 blocks with K a multiple of 64 (and N partial: 1000, 33)
  // A K the 16-byte loads cannot read is an error, not a wrong answer.
  const Weight odd = quantize_fp8(random_tensor({8, 24}, rng), 8, 8).to(Device::cuda(0));
  EXPECT_THROW(cuda::linear(to_cuda(random_tensor({1, 24}, rng), DType::kBF16), odd,
                            Tensor::empty({1, 8}, DType::kF32, Device::cuda(0))),
               Error);
}

// The FP8 tensor-core GEMM against the host product of x quantized as it specifies (per row and
// group of 128 columns, scale = largest magnitude / 448) and the dequantized weight: partial
// weight row blocks, an all-zero group (scale 0), a large value beside tiny ones in one group,
// padded row counts and more rows than one tile. linear() takes it past kMaxFp8GemvRows rows. The
// tensor cores accumulate FP8 products in less than f32 precision: measured errors reach 4.6e-4.
TEST(CudaOpsTest, Fp8GemmMatchesTheProductOfQuantizedRows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(29);
  for (const auto& [n, k] : {std::pair{4096, 4096}, std::pair{1000, 512}, std::pair{40, 14336}}) {
    const Weight host = quantize_fp8(random_tensor({n, k}, rng), 128, 128);
    const Weight device = host.to(Device::cuda(0));
    ASSERT_TRUE(cuda::fp8_gemm_applies(to_cuda(random_tensor({1, k}, rng), DType::kBF16), device));
    for (int64_t m : {1, 9, 64, 300}) {
      Tensor x = rounded(random_tensor({m, k}, rng), DType::kBF16);
      float* xs = x.data<float>();
      std::fill(xs, xs + 128, 0.0f);     // row 0, group 0
      if (m > 1) xs[k + 130] = 1000.0f;  // row 1, group 1
      Tensor quantized = Tensor::empty({m, k}, DType::kF32);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t g = 0; g < k / 128; ++g) {
          const float* in = xs + r * k + g * 128;
          float largest = 0.0f;
          for (int c = 0; c < 128; ++c)
            largest = std::max(largest, std::fabs(in[c]));
          const float inverse = largest > 0.0f ? 448.0f / largest : 0.0f;
          const float scale = largest / 448.0f;
          for (int c = 0; c < 128; ++c) {
            quantized.data<float>()[r * k + g * 128 + c] =
                e4m3_to_f32(f32_to_e4m3(in[c] * inverse)) * scale;
          }
        }
      }
      Tensor ref = Tensor::empty({m, n}, DType::kF32);
      cpu::linear(quantized, host, ref);
      const Tensor device_x = to_cuda(x, DType::kBF16);
      for (DType out_dtype : kActivationDtypes) {
        const Tensor out = poisoned({m, n}, out_dtype);
        cuda::fp8_gemm(device_x, device, out);
        const double limit = out_dtype == DType::kBF16 ? 4e-3 : 1e-3;
        EXPECT_LE(relative_error(to_host_f32(out), ref), limit)
            << "M " << m << " N " << n << " K " << k << " " << dtype_name(out_dtype);
        if (m > cuda::kMaxFp8GemvRows) {
          const Tensor picked = poisoned({m, n}, out_dtype);
          cuda::linear(device_x, device, picked);
          EXPECT_LE(relative_error(to_host_f32(picked), ref), limit) << "linear(), M " << m;
        }
      }
    }
  }
  // Rows of out that cuBLASLt cannot write (N not a multiple of 8) take the dequantized path.
  const Weight narrow = quantize_fp8(random_tensor({33, 512}, rng), 128, 128);
  const Tensor x = rounded(random_tensor({16, 512}, rng), DType::kBF16);
  Tensor ref = Tensor::empty({16, 33}, DType::kF32);
  cpu::linear(x, narrow, ref);
  const Weight device = narrow.to(Device::cuda(0));
  const Tensor device_x = to_cuda(x, DType::kBF16);
  EXPECT_FALSE(cuda::fp8_gemm_applies(device_x, device));
  const Tensor out = poisoned({16, 33}, DType::kF32);
  cuda::linear(device_x, device, out);
  EXPECT_LE(relative_error(to_host_f32(out), ref), 4e-3);  // the weight rounded to bf16
}

// The assistant's centroid-masked head: the same tokens kept per row (ties in the scores included),
// their logits, and every other token at the smallest of them minus one.
TEST(CudaOpsTest, CentroidMaskedLogitsMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(13);
  for (const auto& [rows, hidden, vocab, centroids, top_k] :
       {std::tuple{1, 64, 512, 32, 4}, std::tuple{5, 256, 4096, 128, 32},
        std::tuple{3, 1536, 2048, 2048, 7}}) {
    const Tensor h = rounded(random_tensor({rows, hidden}, rng), DType::kBF16);
    const Tensor head = rounded(random_tensor({vocab, hidden}, rng), DType::kBF16);
    Tensor scores = random_tensor({rows, centroids}, rng);
    scores.data<float>()[1] = scores.data<float>()[0];  // a tie, broken by the lower index
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    Tensor ordering = Tensor::empty({vocab}, DType::kI32);
    std::memcpy(ordering.raw_data(), order.data(), vocab * sizeof(int32_t));
    Tensor ref = Tensor::empty({rows, vocab}, DType::kF32);
    cpu::centroid_masked_logits(h, head, scores, ordering, top_k, ref);
    const Tensor out = poisoned({rows, vocab}, DType::kF32);
    cuda::centroid_masked_logits(to_cuda(h, DType::kBF16), to_cuda(head, DType::kBF16),
                                 scores.to(Device::cuda()), ordering.to(Device::cuda()), top_k,
                                 out);
    const Tensor got = to_host_f32(out);
    EXPECT_LE(relative_error(got, ref), 1e-5) << rows << " rows, vocab " << vocab;
    // The kept tokens are the same: exactly those above the floor on both.
    const float* r = ref.data<float>();
    const float* g = got.data<float>();
    const float ref_floor = *std::min_element(r, r + rows * vocab);
    const float got_floor = *std::min_element(g, g + rows * vocab);
    int64_t kept = 0;
    for (int64_t i = 0; i < rows * vocab; ++i) {
      ASSERT_EQ(r[i] == ref_floor, g[i] == got_floor) << "element " << i;
      kept += r[i] != ref_floor;
    }
    EXPECT_EQ(kept, int64_t{rows} * top_k * (vocab / centroids));
  }
}

// x as rows of a wider buffer (row stride > K), including a single row at a 2-byte offset.
TEST(CudaOpsTest, LinearOnStridedAndMisalignedRows) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(9);
  for (const auto& [m, k, pad, offset] :
       {std::tuple{7, 64, 8, 0}, std::tuple{64, 4096, 64, 0}, std::tuple{1, 200, 3, 1}}) {
    const int64_t n = 256;
    const Tensor wide = rounded(random_tensor({m, k + pad}, rng), DType::kBF16);
    const Tensor x = wide.narrow(1, offset, k).contiguous();
    const Tensor w = rounded(random_tensor({n, k}, rng), DType::kBF16);
    Tensor ref = Tensor::empty({m, n}, DType::kF32);
    cpu::linear(x, w, ref);
    const Tensor out = poisoned({m, n}, DType::kF32);
    cuda::linear(to_cuda(wide, DType::kBF16).narrow(1, offset, k), to_cuda(w, DType::kBF16), out);
    EXPECT_LE(relative_error(to_host_f32(out), ref), 1e-4) << "M " << m << " K " << k;
  }
}

// Conversions round exactly as the host ones do, on aligned and misaligned tensors.
TEST(CudaOpsTest, ConvertMatchesHostRounding) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(10);
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t offset : {0, 1}) {
        const int64_t n = 3 * 100 + 5;
        const Tensor src_host = cast(random_tensor({n}, rng, 100.0f), from);
        const Tensor src = poisoned({n + offset}, from).narrow(0, offset, n);
        src.copy_from(src_host.to(Device::cuda()));
        const Tensor dst = poisoned({n + offset}, to).narrow(0, offset, n);
        cuda::convert(src, dst);
        const Tensor expected = cast(src_host, to);
        const Tensor got = dst.to(Device::cpu());
        EXPECT_EQ(0, std::memcmp(got.raw_data(), expected.raw_data(), n * got.element_size()))
            << dtype_name(from) << " -> " << dtype_name(to) << " offset " << offset;
      }
    }
  }
}

TEST(CudaOpsTest, UnsupportedDtypesAreErrors) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Tensor f16 = Tensor::empty({4, 64}, DType::kF16, Device::cuda());
  const Tensor bf16 = Tensor::empty({4, 64}, DType::kBF16, Device::cuda());
  const Tensor ints = Tensor::empty({4, 64}, DType::kI32, Device::cuda());
  EXPECT_THROW(cuda::linear(bf16, f16, Tensor::empty({4, 4}, DType::kF32, Device::cuda())), Error);
  // Neither a weight of another dtype nor an output of the wrong shape reaches the GEMV kernels.
  EXPECT_THROW(
      cuda::linear(bf16.narrow(0, 0, 1), f16, Tensor::empty({1, 4}, DType::kBF16, Device::cuda())),
      Error);
  EXPECT_THROW(cuda::linear(bf16, bf16, Tensor::empty({4, 3}, DType::kBF16, Device::cuda())),
               InternalError);
  EXPECT_THROW(cuda::rms_norm(ints, Tensor(), 1e-6f, 0.0f, ints), Error);
  EXPECT_THROW(cuda::scale_in_place(f16, 2.0f), Error);
  EXPECT_THROW(cuda::convert(ints, bf16), Error);
}

}  // namespace
}  // namespace pagoda
