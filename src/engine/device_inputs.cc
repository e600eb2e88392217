#include "engine/device_inputs.h"

#include <algorithm>
#include <cstring>

#if PAGODA_HAVE_CUDA
#include "attention/cuda/attention_plan.h"
#include "attention/cuda/paged_attention.h"
#endif

namespace pagoda {

#if PAGODA_HAVE_CUDA

struct DeviceInputs::Plans {
  std::vector<std::unique_ptr<cuda::AttentionPlan>> groups;
  int64_t seqs = 0;
  int64_t tokens = 0;
  int64_t blocks_per_seq = 0;
};

DeviceInputs::DeviceInputs(const KvCachePlan& plan, Device device)
    : plan_(plan), device_(device), plans_(std::make_unique<Plans>()) {}

DeviceInputs::~DeviceInputs() = default;

void DeviceInputs::upload(ForwardBatch& batch, int64_t padding_seqs) {
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  if (!ids_.defined() || ids_.size(0) < tokens) {
    const int64_t capacity = std::max<int64_t>(tokens, 256);
    ids_ = Tensor::empty({capacity}, DType::kI32, device_);
    positions_ = Tensor::empty({capacity}, DType::kI64, device_);
    ++buffer_generation_;
  }
  Tensor host_ids = Tensor::empty({tokens}, DType::kI32);
  Tensor host_positions = Tensor::empty({tokens}, DType::kI64);
  std::memcpy(host_ids.raw_data(), batch.token_ids.data(), tokens * 4);
  std::memcpy(host_positions.raw_data(), batch.positions.data(), tokens * 8);
  batch.device_token_ids = ids_.narrow(0, 0, tokens);
  batch.device_positions = positions_.narrow(0, 0, tokens);
  batch.device_token_ids.copy_from(host_ids);
  batch.device_positions.copy_from(host_positions);

  // Plans sized for the largest step so far; a larger one replaces them all.
  Plans& p = *plans_;
  int64_t seqs = 0;
  int64_t stride = 0;
  for (const AttentionMetadata& meta : batch.group_metadata) {
    seqs = std::max(seqs, meta.num_seqs() + padding_seqs);
    stride = std::max(stride, meta.block_table_stride);
  }
  if (p.groups.empty() || seqs > p.seqs || tokens > p.tokens || stride > p.blocks_per_seq) {
    p.seqs = std::max(seqs, p.seqs * 2);
    p.tokens = std::max(tokens, p.tokens * 2);
    p.blocks_per_seq = std::max(stride, p.blocks_per_seq);
    p.groups.clear();
    ++buffer_generation_;
    for (const KvGroup& group : plan_.groups) {
      p.groups.push_back(std::make_unique<cuda::AttentionPlan>(
          std::max<int64_t>(p.seqs, 1), std::max<int64_t>(p.tokens, 1),
          std::max<int64_t>(p.blocks_per_seq, 1), group.spec.page.block_size));
    }
  }
  batch.group_plans.clear();
  for (size_t g = 0; g < p.groups.size(); ++g) {
    p.groups[g]->update(batch.group_metadata[g], padding_seqs);
    batch.group_plans.push_back(p.groups[g].get());
  }
}

void DeviceInputs::fix_decode_splits(int64_t batch_size) {
  for (size_t g = 0; g < plans_->groups.size(); ++g) {
    const KvPageShape& page = plan_.groups[g].spec.page;
    plans_->groups[g]->fixed_decode_splits = cuda::decode_splits_for(
        page.head_size_k, page.head_size_v, batch_size * page.num_kv_heads, plan_.max_model_len);
  }
}

void DeviceInputs::free_decode_splits() {
  for (const auto& plan : plans_->groups)
    plan->fixed_decode_splits = 0;
}

int64_t DeviceInputs::generation() const {
  return buffer_generation_ + cuda::AttentionPlan::scratch_generation();
}

#else

// Without CUDA no cache lives on a GPU, so these are never reached; they fail if they are.
struct DeviceInputs::Plans {};

DeviceInputs::DeviceInputs(const KvCachePlan& plan, Device device) : plan_(plan), device_(device) {
  fail("this pagoda binary was built without CUDA; {} is unavailable", device.to_string());
}

DeviceInputs::~DeviceInputs() = default;

void DeviceInputs::upload(ForwardBatch&, int64_t) {
  fail("this pagoda binary was built without CUDA");
}

void DeviceInputs::fix_decode_splits(int64_t) {}

void DeviceInputs::free_decode_splits() {}

int64_t DeviceInputs::generation() const {
  return 0;
}

#endif

}  // namespace pagoda
