#include "attention/cpu/cpu_backend.h"

#include "attention/cpu/cpu_attention.h"

namespace pagoda {
namespace {

// The CPU kernel reads the host metadata as it is: nothing to copy or size per step.
class CpuAttentionPlan final : public AttentionPlan {
 public:
  void update(const AttentionMetadata& metadata, const AttentionStep& step) override {
    PAGODA_CHECK(step.padding_seqs == 0, "padding sequences are for CUDA graphs");
    metadata_ = &metadata;
  }
  void forward(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
               const Tensor& value, const KvCacheView& cache, const Tensor& output) override {
    PAGODA_CHECK(metadata_ != nullptr, "attention before the plan's first update");
    cpu_paged_attention(params, query, key, value, cache, *metadata_, output);
  }

 private:
  const AttentionMetadata* metadata_ = nullptr;
};

std::unique_ptr<AttentionPlan> make_cpu_plan(const AttentionGroup&) {
  return std::make_unique<CpuAttentionPlan>();
}

}  // namespace

const AttentionBackend& cpu_attention_backend() {
  static const PagedAttentionBackend backend(
      "cpu", PageOrder::kNhd, {.features = kAllAttentionFeatures}, DeviceType::kCpu, make_cpu_plan);
  return backend;
}

}  // namespace pagoda
