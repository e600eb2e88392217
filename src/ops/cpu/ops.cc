#include "ops/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "ops/cpu/matmul.h"

namespace pagoda::cpu {
namespace {

void check_rows(const Tensor& t, const char* what) {
  PAGODA_CHECK(t.dim() == 2 && t.is_contiguous() && t.dtype() == DType::kF32,
               "{} must be a contiguous 2-D f32 tensor; got shape {}", what, t.shape());
}

// 2-D f32 whose rows are contiguous but may lie any distance apart.
void check_strided_rows(const Tensor& t, const char* what) {
  PAGODA_CHECK(
      t.dim() == 2 && t.stride(1) == 1 && t.stride(0) >= t.size(1) && t.dtype() == DType::kF32,
      "{} must be a 2-D f32 tensor of contiguous rows; got shape {}, strides {}", what, t.shape(),
      t.strides());
}

}  // namespace

void load_floats(const std::byte* src, DType dtype, int64_t count, float scale, float* out) {
  // Each element through `widen`, from a value of `Bits` read unaligned.
  const auto convert = [&]<typename Bits>(auto widen) {
    for (int64_t i = 0; i < count; ++i) {
      Bits bits;
      std::memcpy(&bits, src + i * sizeof(Bits), sizeof(Bits));
      out[i] = widen(bits) * scale;
    }
  };
  switch (dtype) {
    case DType::kF32:
      return convert.operator()<float>([](float value) { return value; });
    case DType::kF16:
      return convert.operator()<uint16_t>([](uint16_t bits) { return f16_to_f32(bits); });
    case DType::kBF16:
      return convert.operator()<uint16_t>([](uint16_t bits) { return bf16_to_f32(bits); });
    case DType::kF8E4M3:
      return convert.operator()<uint8_t>([](uint8_t bits) { return e4m3_to_f32(bits); });
    default:
      PAGODA_CHECK(false, "load_floats of {}", dtype_name(dtype));
  }
}

float load_float(const std::byte* element, DType dtype) {
  float value;
  load_floats(element, dtype, 1, 1.0f, &value);
  return value;
}

void store_float(std::byte* element, DType dtype, float value) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(element, &value, 4);
      return;
    case DType::kF16: {
      const uint16_t bits = f32_to_f16(value);
      std::memcpy(element, &bits, 2);
      return;
    }
    case DType::kBF16: {
      const uint16_t bits = f32_to_bf16(value);
      std::memcpy(element, &bits, 2);
      return;
    }
    case DType::kF8E4M3:
      *element = static_cast<std::byte>(f32_to_e4m3(value));
      return;
    default:
      PAGODA_CHECK(false, "store_float of {}", dtype_name(dtype));
  }
}

std::vector<float> to_floats(const Tensor& input) {
  const Tensor t = input.device().is_cpu() ? input.contiguous() : input.to(Device::cpu());
  std::vector<float> values(t.numel());
  load_floats(t.raw_data(), t.dtype(), t.numel(), 1.0f, values.data());
  return values;
}

void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& out) {
  check_rows(out, "embedding output");
  const int64_t vocab = table.size(0);
  const int64_t hidden = table.size(1);
  PAGODA_CHECK(out.size(0) == static_cast<int64_t>(ids.size()) && out.size(1) == hidden,
               "embedding output shape {}", out.shape());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary of {}", id, vocab);
  }
  const int64_t element = table.element_size();
  ThreadPool::global().parallel_for(
      static_cast<int64_t>(ids.size()), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const std::byte* row = table.raw_data() + ids[t] * hidden * element;
          float* dst = out.data<float>() + t * hidden;
          for (int64_t h = 0; h < hidden; ++h)
            dst[h] = load_float(row + h * element, table.dtype());
        }
      });
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out) {
  check_rows(x, "rms_norm input");
  check_rows(out, "rms_norm output");
  const int64_t dim = x.size(1);
  PAGODA_CHECK((!weight.defined() || weight.numel() == dim) && out.size(0) == x.size(0),
               "rms_norm shapes");
  std::vector<float> scale(dim, 1.0f);
  for (int64_t i = 0; weight.defined() && i < dim; ++i) {
    scale[i] =
        load_float(weight.raw_data() + i * weight.element_size(), weight.dtype()) + weight_offset;
  }
  ThreadPool::global().parallel_for(x.size(0), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = x.data<float>() + r * dim;
      float* dst = out.data<float>() + r * dim;
      float sum = 0.0f;
      for (int64_t i = 0; i < dim; ++i)
        sum += in[i] * in[i];
      const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
      for (int64_t i = 0; i < dim; ++i)
        dst[i] = in[i] * inverse * scale[i];
    }
  });
}

void add_in_place(const Tensor& x, const Tensor& y) {
  PAGODA_CHECK(x.shape() == y.shape() && x.is_contiguous() && y.is_contiguous() &&
                   x.dtype() == DType::kF32 && y.dtype() == DType::kF32,
               "add_in_place shapes {} and {}", x.shape(), y.shape());
  float* a = x.data<float>();
  const float* b = y.data<float>();
  ThreadPool::global().parallel_for(x.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      a[i] += b[i];
  });
}

void gated_activation(Activation activation, const Tensor& gate, const Tensor& up,
                      const Tensor& out) {
  check_strided_rows(gate, "gated activation gate");
  check_strided_rows(up, "gated activation up");
  check_strided_rows(out, "gated activation output");
  PAGODA_CHECK(gate.shape() == up.shape() && gate.shape() == out.shape(),
               "gated activation shapes {}, {} -> {}", gate.shape(), up.shape(), out.shape());
  const float* gates = gate.data<float>();
  const float* ups = up.data<float>();
  float* dst = out.data<float>();
  const int64_t cols = out.size(1);
  ThreadPool::global().parallel_for(out.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = i / cols;
      const int64_t col = i % cols;
      const float g = gates[row * gate.stride(0) + col];
      const float u = ups[row * up.stride(0) + col];
      float activated;
      if (activation == Activation::kSilu) {
        activated = g / (1.0f + std::exp(-g));
      } else {
        constexpr float kSqrt2OverPi = 0.7978845608028654f;
        activated = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
      }
      dst[row * out.stride(0) + col] = activated * u;
    }
  });
}

void softcap_in_place(const Tensor& x, float cap) {
  PAGODA_CHECK(x.is_contiguous() && x.dtype() == DType::kF32, "softcap needs contiguous f32");
  float* data = x.data<float>();
  ThreadPool::global().parallel_for(x.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      data[i] = cap * std::tanh(data[i] / cap);
  });
}

void log_softmax(const Tensor& logits, const Tensor& out) {
  check_rows(logits, "log_softmax input");
  check_rows(out, "log_softmax output");
  const int64_t vocab = logits.size(1);
  ThreadPool::global().parallel_for(logits.size(0), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = logits.data<float>() + r * vocab;
      float* dst = out.data<float>() + r * vocab;
      float max = in[0];
      for (int64_t i = 1; i < vocab; ++i)
        max = std::max(max, in[i]);
      double sum = 0.0;
      for (int64_t i = 0; i < vocab; ++i)
        sum += std::exp(static_cast<double>(in[i] - max));
      const float log_sum = static_cast<float>(std::log(sum)) + max;
      for (int64_t i = 0; i < vocab; ++i)
        dst[i] = in[i] - log_sum;
    }
  });
}

void centroid_masked_logits(const Tensor& hidden, const Tensor& lm_head, const Tensor& scores,
                            const Tensor& token_ordering, int64_t top_k, const Tensor& out) {
  check_rows(hidden, "hidden");
  check_rows(scores, "centroid scores");
  check_rows(out, "logits");
  const int64_t rows = hidden.size(0);
  const int64_t vocab = lm_head.size(0);
  const int64_t num_centroids = scores.size(1);
  PAGODA_CHECK(token_ordering.dtype() == DType::kI32 && token_ordering.numel() == vocab &&
                   vocab % num_centroids == 0 && top_k >= 1 && top_k <= num_centroids,
               "centroid head: {} centroids over {} tokens, top {}", num_centroids, vocab, top_k);
  const int64_t per_centroid = vocab / num_centroids;
  const int32_t* ordering = token_ordering.data<int32_t>();
  // The selected tokens of every row and their logits; the rest get the smallest of all of them
  // minus one.
  std::vector<std::vector<int64_t>> selected(rows);
  std::vector<std::vector<float>> values(rows);
  float smallest = std::numeric_limits<float>::infinity();
  Tensor logit = Tensor::empty({1, 1}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores.data<float>() + r * num_centroids;
    std::vector<int64_t> order(num_centroids);
    for (int64_t c = 0; c < num_centroids; ++c)
      order[c] = c;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t a, int64_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    const Tensor h = hidden.narrow(0, r, 1);
    for (int64_t k = 0; k < top_k; ++k) {
      for (int64_t j = 0; j < per_centroid; ++j) {
        const int64_t token = ordering[order[k] * per_centroid + j];
        linear(h, lm_head.narrow(0, token, 1), logit);
        selected[r].push_back(token);
        values[r].push_back(logit.data<float>()[0]);
        smallest = std::min(smallest, values[r].back());
      }
    }
  }
  float* logits = out.data<float>();
  std::fill_n(logits, rows * vocab, smallest - 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < selected[r].size(); ++i)
      logits[r * vocab + selected[r][i]] = values[r][i];
  }
}

}  // namespace pagoda::cpu
