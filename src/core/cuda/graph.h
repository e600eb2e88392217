// A CUDA graph of the work one callable queues on the engine stream, replayed as one launch.
#pragma once

#include <functional>
#include <vector>

#include "core/cuda/device_storage.h"

namespace pagoda::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Records (without running) what `body` queues on cuda::stream(). `body` must not synchronise
  // with the host or allocate device memory the caching allocator does not already hold. The
  // device memory `body` frees (its scratch, which replays write) stays the graph's until it is
  // destroyed.
  void capture(const std::function<void()>& body);
  // Queues the recorded work on cuda::stream().
  void replay() const;

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  std::vector<DeviceBlock> scratch_;
};

}  // namespace pagoda::cuda
