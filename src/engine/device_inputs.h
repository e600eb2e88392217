// A step's inputs on a GPU: token ids, positions and each KV group's attention plan, in buffers
// that keep their addresses from step to step (a CUDA graph replays over them).
#pragma once

#include <memory>
#include <vector>

#include "kv/kv_cache_plan.h"
#include "model/causal_lm.h"

namespace pagoda {

class DeviceInputs {
 public:
  DeviceInputs(const KvCachePlan& plan, Device device);
  ~DeviceInputs();
  DeviceInputs(const DeviceInputs&) = delete;
  DeviceInputs& operator=(const DeviceInputs&) = delete;

  // Copies `batch`'s ids, positions and per-group metadata to the device and points the batch's
  // device fields at them. Buffers grow when a step is larger than any before.
  void upload(ForwardBatch& batch);

  // Per-group plans (for fixing decode splits before a graph capture).
  std::vector<cuda::AttentionPlan*> plans() const;

 private:
  const KvCachePlan& plan_;
  Device device_;
  Tensor ids_;        // [capacity] int32
  Tensor positions_;  // [capacity] int64
  struct Plans;
  std::unique_ptr<Plans> plans_;
};

}  // namespace pagoda
