#include "engine/device_inputs.h"

#include <algorithm>
#include <cstring>

#include "attention/cuda/attention_plan.h"

namespace pagoda {

struct DeviceInputs::Plans {
  std::vector<std::unique_ptr<cuda::AttentionPlan>> groups;
  int64_t seqs = 0;
  int64_t tokens = 0;
  int64_t blocks_per_seq = 0;
};

DeviceInputs::DeviceInputs(const KvCachePlan& plan, Device device)
    : plan_(plan), device_(device), plans_(std::make_unique<Plans>()) {}

DeviceInputs::~DeviceInputs() = default;

void DeviceInputs::upload(ForwardBatch& batch) {
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  if (!ids_.defined() || ids_.size(0) < tokens) {
    const int64_t capacity = std::max<int64_t>(tokens, 256);
    ids_ = Tensor::empty({capacity}, DType::kI32, device_);
    positions_ = Tensor::empty({capacity}, DType::kI64, device_);
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
    seqs = std::max(seqs, meta.num_seqs());
    stride = std::max(stride, meta.block_table_stride);
  }
  if (p.groups.empty() || seqs > p.seqs || tokens > p.tokens || stride > p.blocks_per_seq) {
    p.seqs = std::max(seqs, p.seqs * 2);
    p.tokens = std::max(tokens, p.tokens * 2);
    p.blocks_per_seq = std::max(stride, p.blocks_per_seq);
    p.groups.clear();
    for (const KvGroup& group : plan_.groups) {
      p.groups.push_back(std::make_unique<cuda::AttentionPlan>(
          std::max<int64_t>(p.seqs, 1), std::max<int64_t>(p.tokens, 1),
          std::max<int64_t>(p.blocks_per_seq, 1), group.spec.page.block_size));
    }
  }
  batch.group_plans.clear();
  for (size_t g = 0; g < p.groups.size(); ++g) {
    p.groups[g]->update(batch.group_metadata[g]);
    batch.group_plans.push_back(p.groups[g].get());
  }
}

std::vector<cuda::AttentionPlan*> DeviceInputs::plans() const {
  std::vector<cuda::AttentionPlan*> out;
  for (const auto& plan : plans_->groups)
    out.push_back(plan.get());
  return out;
}

}  // namespace pagoda
