#include "attention/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "attention/cuda/device_metadata.h"
#include "attention/cuda/paged_attention.h"
#include "core/error.h"

namespace pagoda {
namespace {

class CudaAttentionPlan final : public AttentionPlan {
 public:
  CudaAttentionPlan(const AttentionGroup& group, cuda::PrefillCtas ctas)
      : group_(group), prefill_ctas_(ctas) {
    // The kernels keep positions and sequence lengths in 32 bits.
    if (group.max_model_len > std::numeric_limits<int32_t>::max()) {
      fail("CUDA attention takes sequences of up to {} tokens; max_model_len is {}",
           std::numeric_limits<int32_t>::max(), group.max_model_len);
    }
  }

  void update(const AttentionMetadata& metadata, const AttentionStep& step) override {
    const int64_t seqs = metadata.num_seqs() + step.padding_seqs;
    const int64_t tokens =
        metadata.num_actual_tokens + step.padding_seqs * metadata.decode_query_len();
    const int64_t blocks_per_seq = metadata.block_table_stride;
    // Buffers for the largest step so far; a larger one replaces them, with room to grow.
    if (!device_ || seqs > seqs_ || tokens > tokens_ || blocks_per_seq > blocks_per_seq_) {
      seqs_ = std::max(seqs, seqs_ * 2);
      tokens_ = std::max(tokens, tokens_ * 2);
      blocks_per_seq_ = std::max(blocks_per_seq, blocks_per_seq_);
      device_.reset();
      device_ = std::make_unique<cuda::DeviceMetadata>(
          std::max<int64_t>(seqs_, 1), std::max<int64_t>(tokens_, 1),
          std::max<int64_t>(blocks_per_seq_, 1), group_.page.block_size);
      device_->prefill_ctas = prefill_ctas_;
      ++reallocations_;
    }
    // A graph's grid is captured, so its split count is the one for its batch size and the
    // longest sequence it may replay.
    device_->graph_max_seq_len = step.graph ? group_.max_model_len : 0;
    device_->update(metadata, step.padding_seqs);
  }

  void forward(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
               const Tensor& value, const KvCacheView& cache, const Tensor& output) override {
    PAGODA_CHECK(device_ != nullptr, "attention before the plan's first update");
    cuda::paged_attention(params, query, key, value, cache, *device_, output);
  }

  int64_t generation() const override {
    return reallocations_ + cuda::DeviceMetadata::scratch_generation();
  }

 private:
  AttentionGroup group_;
  cuda::PrefillCtas prefill_ctas_;
  std::unique_ptr<cuda::DeviceMetadata> device_;
  int64_t seqs_ = 0, tokens_ = 0, blocks_per_seq_ = 0;  // what device_ holds
  int64_t reallocations_ = 0;
};

// For timing one prefill CTA shape against another inside whole steps: PAGODA_PREFILL_CTAS names
// the shape every plan runs (prefill_ctas_name's names); unset or auto, each launch's default.
cuda::PrefillCtas prefill_ctas_from_environment() {
  static const cuda::PrefillCtas ctas = [] {
    const char* value = std::getenv("PAGODA_PREFILL_CTAS");
    const std::string_view name = value == nullptr ? "auto" : value;
    if (name == cuda::prefill_ctas_name(cuda::PrefillCtas::kDefault)) {
      return cuda::PrefillCtas::kDefault;
    }
    std::string names(cuda::prefill_ctas_name(cuda::PrefillCtas::kDefault));
    for (const cuda::PrefillCtas c : cuda::kPrefillCtasShapes) {
      if (cuda::prefill_ctas_name(c) == name) return c;
      names += fmt::format(", {}", cuda::prefill_ctas_name(c));
    }
    fail("PAGODA_PREFILL_CTAS is one of {}, not '{}'", names, name);
  }();
  return ctas;
}

std::unique_ptr<AttentionPlan> make_default_cuda_plan(const AttentionGroup& group) {
  return std::make_unique<CudaAttentionPlan>(group, prefill_ctas_from_environment());
}

AttentionSupport cuda_support() {
  AttentionSupport support{.features = kAllAttentionFeatures,
                           .max_q_per_kv = cuda::kMaxQueriesPerKvHead,
                           .cache_dtypes = {DType::kBF16, DType::kF8E4M3},
                           .row_bytes_multiple = cuda::kRowBytesMultiple};
  support.head_sizes.assign(cuda::kHeadSizes.begin(), cuda::kHeadSizes.end());
  return support;
}

}  // namespace

const AttentionBackend& cuda_attention_backend() {
  static const PagedAttentionBackend backend("cuda", PageOrder::kNhd, cuda_support(),
                                             DeviceType::kCuda, make_default_cuda_plan);
  return backend;
}

std::unique_ptr<AttentionPlan> make_cuda_plan(const AttentionGroup& group, cuda::PrefillCtas ctas) {
  return std::make_unique<CudaAttentionPlan>(group, ctas);
}

}  // namespace pagoda
