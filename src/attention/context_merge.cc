#include "attention/context_merge.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#if PAGODA_HAVE_CUDA
#include "attention/cuda/context_merge.h"
#endif

namespace pagoda {
namespace {

void merge_on_cpu(const Tensor& parts, const Tensor& lses, int64_t head_begin, const Tensor& out) {
  const int64_t ranks = parts.size(0);
  const int64_t tokens = parts.size(1);
  const int64_t heads = parts.size(2);
  const int64_t dim = parts.size(3);
  const int64_t out_heads = out.size(1);
  const float* part = parts.data<float>();
  const float* lse = lses.data<float>();
  float* merged = out.data<float>();
  std::vector<float> weights(ranks);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < out_heads; ++h) {
      const int64_t head = head_begin + h;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t r = 0; r < ranks; ++r)
        max = std::max(max, lse[(r * tokens + t) * heads + head]);
      float sum = 0.0f;
      for (int64_t r = 0; r < ranks; ++r) {
        const float l = lse[(r * tokens + t) * heads + head];
        weights[r] = std::isinf(max) ? 0.0f : std::exp(l - max);
        sum += weights[r];
      }
      float* dst = merged + (t * out_heads + h) * dim;
      for (int64_t d = 0; d < dim; ++d)
        dst[d] = 0.0f;
      if (sum == 0.0f) continue;
      for (int64_t r = 0; r < ranks; ++r) {
        const float w = weights[r] / sum;
        const float* src = part + ((r * tokens + t) * heads + head) * dim;
        for (int64_t d = 0; d < dim; ++d)
          dst[d] += w * src[d];
      }
    }
  }
}

}  // namespace

void merge_attention_parts(const Tensor& parts, const Tensor& lses, int64_t head_begin,
                           const Tensor& out) {
  PAGODA_CHECK(parts.dim() == 4 && parts.is_contiguous(), "parts must be [R, T, H, Dv], not {}",
               parts.shape());
  PAGODA_CHECK(lses.dim() == 3 && lses.is_contiguous() && lses.dtype() == DType::kF32 &&
                   lses.size(0) == parts.size(0) && lses.size(1) == parts.size(1) &&
                   lses.size(2) == parts.size(2),
               "log-sum-exps {} for parts {}", lses.shape(), parts.shape());
  PAGODA_CHECK(out.dim() == 3 && out.is_contiguous() && out.dtype() == parts.dtype() &&
                   out.size(0) == parts.size(1) && out.size(2) == parts.size(3) &&
                   head_begin >= 0 && head_begin + out.size(1) <= parts.size(2),
               "merged output {} of heads from {} for parts {}", out.shape(), head_begin,
               parts.shape());
  PAGODA_CHECK(parts.device() == lses.device() && parts.device() == out.device(),
               "parts, log-sum-exps and output on different devices");
  if (parts.device().is_cpu()) {
    PAGODA_CHECK(parts.dtype() == DType::kF32, "CPU parts must be f32");
    merge_on_cpu(parts, lses, head_begin, out);
    return;
  }
#if PAGODA_HAVE_CUDA
  cuda::merge_attention_parts(parts, lses, head_begin, out);
#else
  fail("this pagoda binary was built without CUDA");
#endif
}

}  // namespace pagoda
