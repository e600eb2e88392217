#include "ops/ops.h"

#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/rope.h"
#if PAGODA_HAVE_CUDA
#include "ops/cuda/ops.h"
#endif

namespace pagoda::ops {
namespace {

// Runs on_cpu() for host tensors and on_gpu() for device ones.
template <typename Cpu, typename Gpu>
void dispatch(const Tensor& x, Cpu&& on_cpu, Gpu&& on_gpu) {
  if (x.device().is_cpu()) return on_cpu();
#if PAGODA_HAVE_CUDA
  on_gpu();
#else
  (void)on_gpu;
  fail("this pagoda binary was built without CUDA; {} tensors cannot be computed",
       x.device().to_string());
#endif
}

}  // namespace

// The GPU branch of a dispatch: the call, or nothing in a build without CUDA.
#if PAGODA_HAVE_CUDA
#define PAGODA_GPU(call) [&] { call; }
#else
#define PAGODA_GPU(call) [] {}
#endif

DType activation_dtype(Device device) {
  return device.is_cpu() ? DType::kF32 : DType::kBF16;
}

Tensor like(const Tensor& x, const Shape& shape) {
  return Tensor::uninitialized(shape, x.dtype(), x.device());
}

void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& device_ids,
               float scale, const Tensor& out) {
  const int64_t vocab = table.size(0);
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary of {}", id, vocab);
  }
  dispatch(
      out,
      [&] {
        cpu::embedding(table, ids, out);
        if (scale != 1.0f) scale_in_place(out, scale);
      },
      PAGODA_GPU(cuda::embedding(table, device_ids, scale, out)));
}

Tensor linear(const Tensor& x, const Weight& weight) {
  return linear(x, weight, x.dtype());
}

Tensor linear(const Tensor& x, const Weight& weight, DType out_dtype) {
  Tensor out = Tensor::uninitialized({x.size(0), weight.rows()}, out_dtype, x.device());
  dispatch(
      x, [&] { cpu::linear(x, weight, out); }, PAGODA_GPU(cuda::linear(x, weight, out)));
  return out;
}

Tensor paired_gated_linear(const Tensor& x, const Weight& gate_up, Activation activation) {
  const int64_t n = gate_up.rows() / 2;
  PAGODA_CHECK(gate_up.rows() % 2 == 0, "a gate and up projection of {} rows", gate_up.rows());
  Tensor out = like(x, {x.size(0), n});
#if PAGODA_HAVE_CUDA
  if (!x.device().is_cpu() && cuda::paired_gated_applies(x, gate_up, out)) {
    cuda::paired_gated_linear(x, gate_up, activation, out);
    return out;
  }
#endif
  const Tensor both = linear(x, gate_up);
  gated_activation(activation, both.narrow(1, 0, n), both.narrow(1, n, n), out);
  return out;
}

Tensor gated_linear(const Tensor& x, const Weight& weight, Activation activation,
                    const Tensor& up) {
  Tensor out = Tensor::uninitialized({x.size(0), weight.rows()}, x.dtype(), x.device());
  dispatch(
      x,
      [&] {
        cpu::linear(x, weight, out);
        cpu::gated_activation(activation, out, up, out);
      },
      PAGODA_GPU(cuda::gated_linear(x, weight, activation, up, out)));
  return out;
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out) {
  dispatch(
      x, [&] { cpu::rms_norm(x, weight, eps, weight_offset, out); },
      PAGODA_GPU(cuda::rms_norm(x, weight, eps, weight_offset, out)));
}

void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                  float weight_offset, const Tensor& out) {
  dispatch(
      residual,
      [&] {
        cpu::add_in_place(residual, x);
        cpu::rms_norm(residual, weight, eps, weight_offset, out);
      },
      PAGODA_GPU(cuda::add_rms_norm(residual, x, weight, eps, weight_offset, out)));
}

void add_normed(const Tensor& residual, const Tensor& x, const RmsNormParams& x_norm, float scale,
                const RmsNormParams& out_norm, const Tensor& out) {
  dispatch(
      residual,
      [&] {
        const Tensor normed = like(x, x.shape());
        cpu::rms_norm(x, x_norm.weight, x_norm.eps, x_norm.weight_offset, normed);
        cpu::add_in_place(residual, normed);
        if (scale != 1.0f) scale_in_place(residual, scale);
        if (out.defined()) {
          cpu::rms_norm(residual, out_norm.weight, out_norm.eps, out_norm.weight_offset, out);
        }
      },
      PAGODA_GPU(cuda::add_normed(residual, x, x_norm, scale, out_norm, out)));
}

void add_in_place(const Tensor& x, const Tensor& y) {
  dispatch(
      x, [&] { cpu::add_in_place(x, y); }, PAGODA_GPU(cuda::add_in_place(x, y)));
}

void scale_in_place(const Tensor& x, float factor) {
  dispatch(
      x,
      [&] {
        PAGODA_CHECK(x.is_contiguous() && x.dtype() == DType::kF32, "scale of {}", x.shape());
        float* data = x.data<float>();
        for (int64_t i = 0; i < x.numel(); ++i)
          data[i] *= factor;
      },
      PAGODA_GPU(cuda::scale_in_place(x, factor)));
}

void softcap_in_place(const Tensor& x, float cap) {
  dispatch(
      x, [&] { cpu::softcap_in_place(x, cap); }, PAGODA_GPU(cuda::softcap_in_place(x, cap)));
}

void gated_activation(Activation activation, const Tensor& gate, const Tensor& up,
                      const Tensor& out) {
  dispatch(
      gate, [&] { cpu::gated_activation(activation, gate, up, out); },
      PAGODA_GPU(cuda::gated_activation(activation, gate, up, out)));
}

void rope(const std::vector<float>& inverse_frequencies, const Tensor& device_frequencies,
          int64_t rotary_dim, const std::vector<int64_t>& positions, const Tensor& device_positions,
          const Tensor& x) {
  dispatch(
      x, [&] { apply_rope_cpu(inverse_frequencies, rotary_dim, positions, x); },
      PAGODA_GPU(cuda::rope(device_frequencies, rotary_dim, device_positions, x)));
}

void norm_rope(const RmsNormParams& norm, const std::vector<float>& inverse_frequencies,
               const Tensor& device_frequencies, int64_t rotary_dim,
               const std::vector<int64_t>& positions, const Tensor& device_positions,
               const Tensor& x) {
  dispatch(
      x,
      [&] {
        const Tensor rows = x.view({x.size(0) * x.size(1), x.size(2)});
        cpu::rms_norm(rows, norm.weight, norm.eps, norm.weight_offset, rows);
        if (rotary_dim > 0) apply_rope_cpu(inverse_frequencies, rotary_dim, positions, x);
      },
      PAGODA_GPU(cuda::norm_rope(norm, device_frequencies, rotary_dim, device_positions, x)));
}

void norm_rope(std::span<const NormRopePart> parts, const std::vector<float>& inverse_frequencies,
               const Tensor& device_frequencies, int64_t rotary_dim,
               const std::vector<int64_t>& positions, const Tensor& device_positions) {
  PAGODA_CHECK(!parts.empty() && parts.size() <= kMaxRopeParts, "norm_rope of {} tensors; 1 to {}",
               parts.size(), kMaxRopeParts);
  dispatch(
      parts.front().x,
      [&] {
        for (const NormRopePart& part : parts) {
          norm_rope(part.norm, inverse_frequencies, device_frequencies,
                    part.rotate ? rotary_dim : 0, positions, device_positions, part.x);
        }
      },
      PAGODA_GPU(cuda::norm_rope(parts, device_frequencies, rotary_dim, device_positions)));
}

void sample(const Tensor& logits, std::span<const SamplingRow> rows, const Tensor& ids,
            const Tensor& logprobs, const Tensor& kept, const Tensor& draft_logits) {
  PAGODA_CHECK(!logits.device().is_cpu(), "host logits are sampled by the engine's Sampler");
  dispatch(
      logits, [] {}, PAGODA_GPU(cuda::sample(logits, rows, ids, logprobs, kept, draft_logits)));
}

void check_centroid_head(int64_t num_centroids, int64_t hidden_size, Device device) {
  if (device.is_cpu()) return;
  if (num_centroids > kCentroidHeadMaxWidth || hidden_size > kCentroidHeadMaxWidth ||
      hidden_size % 8 != 0) {
    fail(
        "the centroid head on a GPU takes up to {} centroids and hidden sizes up to {} that are "
        "multiples of 8; got {} centroids and hidden size {}",
        kCentroidHeadMaxWidth, kCentroidHeadMaxWidth, num_centroids, hidden_size);
  }
}

Tensor centroid_masked_logits(const Tensor& hidden, const Tensor& lm_head, const Tensor& scores,
                              const Tensor& token_ordering, int64_t top_k) {
  Tensor out =
      Tensor::uninitialized({hidden.size(0), lm_head.size(0)}, DType::kF32, hidden.device());
  dispatch(
      hidden,
      [&] { cpu::centroid_masked_logits(hidden, lm_head, scores, token_ordering, top_k, out); },
      PAGODA_GPU(
          cuda::centroid_masked_logits(hidden, lm_head, scores, token_ordering, top_k, out)));
  return out;
}

#undef PAGODA_GPU

}  // namespace pagoda::ops
