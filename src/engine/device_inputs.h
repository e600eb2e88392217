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
  // device fields at them. A decode-only batch padded with `padding_seqs` one-token rows (a CUDA
  // graph's size) gets as many padding sequences in its plans. Buffers grow when a step is larger
  // than any before.
  void upload(ForwardBatch& batch, int64_t padding_seqs = 0);

  // KV splits of decode attention: chosen per step (0), or fixed for a graph's batch size.
  void fix_decode_splits(int64_t batch_size);
  void free_decode_splits();

  // Changes whenever a buffer a captured graph points at is replaced.
  int64_t generation() const;

 private:
  const KvCachePlan& plan_;
  Device device_;
  Tensor ids_;        // [capacity] int32
  Tensor positions_;  // [capacity] int64
  int64_t buffer_generation_ = 0;
  struct Plans;
  std::unique_ptr<Plans> plans_;
};

}  // namespace pagoda
