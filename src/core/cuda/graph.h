// A CUDA graph of the work one callable queues on the engine stream, replayed as one launch.
#pragma once

#include <functional>

namespace pagoda::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Records (without running) what `body` queues on cuda::stream(). `body` must not synchronise
  // with the host or allocate device memory the caching allocator does not already hold.
  void capture(const std::function<void()>& body);
  // Queues the recorded work on cuda::stream().
  void replay() const;

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

}  // namespace pagoda::cuda
