#include "ops/rope.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "core/thread_pool.h"

namespace pagoda {

std::vector<float> rope_inverse_frequencies(const RopeParams& params) {
  PAGODA_CHECK(
      params.rotary_dim > 0 && params.rotary_dim % 2 == 0 && params.rotary_dim <= params.head_size,
      "rotary dim {} for head size {}", params.rotary_dim, params.head_size);
  const int64_t pairs = params.rotary_dim / 2;
  std::vector<float> inverse(pairs);
  const float base = static_cast<float>(params.theta);
  for (int64_t i = 0; i < pairs; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.rotary_dim);
    inverse[i] = 1.0f / std::pow(base, exponent);
  }
  if (params.scaling == RopeScaling::kProportional) {
    const int64_t angles =
        static_cast<int64_t>(params.partial_rotary_factor * params.head_size / 2);
    for (int64_t i = angles; i < pairs; ++i)
      inverse[i] = 0.0f;
    for (float& f : inverse)
      f = static_cast<float>(f / params.factor);
  } else if (params.scaling == RopeScaling::kLinear) {
    for (float& f : inverse)
      f = static_cast<float>(f / params.factor);
  } else if (params.scaling == RopeScaling::kLlama3) {
    // Long wavelengths are slowed by `factor`, short ones kept, and the band between blended.
    const double low_wavelen = params.original_max_position / params.low_freq_factor;
    const double high_wavelen = params.original_max_position / params.high_freq_factor;
    for (float& f : inverse) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / params.factor);
      } else if (wavelen >= high_wavelen) {
        const double smooth = (params.original_max_position / wavelen - params.low_freq_factor) /
                              (params.high_freq_factor - params.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / params.factor + smooth * f);
      }
    }
  }
  return inverse;
}

void apply_rope_cpu(const std::vector<float>& inverse_frequencies, int64_t rotary_dim,
                    const std::vector<int64_t>& positions, const Tensor& x) {
  PAGODA_CHECK(x.dim() == 3 && x.dtype() == DType::kF32 && x.stride(2) == 1,
               "rope input must be [tokens, heads, dim] f32 with unit inner stride");
  const int64_t tokens = x.size(0);
  const int64_t heads = x.size(1);
  const int64_t half = rotary_dim / 2;
  PAGODA_CHECK(static_cast<int64_t>(positions.size()) >= tokens, "rope positions");
  PAGODA_CHECK(static_cast<int64_t>(inverse_frequencies.size()) == half, "rope frequencies");
  ThreadPool::global().parallel_for(tokens, [&](int64_t begin, int64_t end) {
    std::vector<float> cos(half);
    std::vector<float> sin(half);
    for (int64_t t = begin; t < end; ++t) {
      const float position = static_cast<float>(positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = position * inverse_frequencies[i];
        cos[i] = std::cos(angle);
        sin[i] = std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x.data<float>() + t * x.stride(0) + h * x.stride(1);
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i];
          const float b = v[i + half];
          v[i] = a * cos[i] - b * sin[i];
          v[i + half] = b * cos[i] + a * sin[i];
        }
      }
    }
  });
}

}  // namespace pagoda
