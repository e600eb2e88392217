#include "core/cuda/context.h"
#include "core/cuda/graph.h"

namespace pagoda::cuda {

Graph::~Graph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  release_blocks(scratch_);
}

void Graph::capture(const std::function<void()>& body) {
  PAGODA_CHECK(exec_ == nullptr, "a graph is captured once");
  const cudaStream_t s = stream();
  PAGODA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    release_blocks(take_captured_frees());
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  scratch_ = take_captured_frees();
  PAGODA_CUDA_CHECK(ended);
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  PAGODA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void Graph::replay() const {
  PAGODA_CHECK(exec_ != nullptr, "replay of a graph never captured");
  PAGODA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream()));
}

}  // namespace pagoda::cuda
