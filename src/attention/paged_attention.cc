#include "attention/paged_attention.h"

#if PAGODA_HAVE_CUDA
#include "attention/cuda/paged_attention.h"
#endif

namespace pagoda {

void paged_attention(const AttentionLayerParams& params, const Tensor& device_sinks,
                     const Tensor& query, const Tensor& key, const Tensor& value,
                     const KvCacheView& cache, const AttentionMetadata& metadata,
                     cuda::AttentionPlan* plan, const Tensor& output) {
  if (query.device().is_cpu()) {
    cpu_paged_attention(params, query, key, value, cache, metadata, output);
    return;
  }
#if PAGODA_HAVE_CUDA
  PAGODA_CHECK(plan != nullptr, "a GPU attention layer needs its group's device plan");
  AttentionLayerParams gpu = params;
  gpu.sinks = params.sinks != nullptr ? device_sinks.data<float>() : nullptr;
  cuda::paged_attention(gpu, query, key, value, cache, *plan, output);
#else
  fail("this pagoda binary was built without CUDA; attention on {} is unavailable",
       query.device().to_string());
#endif
}

}  // namespace pagoda
