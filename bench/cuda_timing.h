// Timing helpers of the CUDA benchmark programs: CUDA events on the engine stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/cuda/context.h"
#include "core/cuda/graph.h"

namespace pagoda::bench {

// Median of `runs` timings of `body(i)` in milliseconds, each the mean of `inner` calls, after
// three untimed calls.
template <typename Body>
double median_ms(int runs, int inner, Body&& body) {
  cudaEvent_t start, stop;
  PAGODA_CUDA_CHECK(cudaEventCreate(&start));
  PAGODA_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i)
    body(i);
  std::vector<double> times;
  for (int r = 0; r < runs; ++r) {
    PAGODA_CUDA_CHECK(cudaEventRecord(start, cuda::stream()));
    for (int i = 0; i < inner; ++i)
      body(i);
    PAGODA_CUDA_CHECK(cudaEventRecord(stop, cuda::stream()));
    PAGODA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    PAGODA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms / inner);
  }
  std::sort(times.begin(), times.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return times[times.size() / 2];
}

// The same for `inner` calls captured once into a CUDA graph and replayed, as a decode step's
// graph runs its kernels: the GPU's time without the host's per-launch cost. The calls run once
// eagerly first to size whatever they allocate, since a capture may not allocate.
template <typename Body>
double graph_median_ms(int runs, int inner, Body&& body) {
  for (int i = 0; i < inner; ++i)
    body(i);
  cuda::Graph graph;
  graph.capture([&] {
    for (int i = 0; i < inner; ++i)
      body(i);
  });
  return median_ms(runs, 1, [&](int) { graph.replay(); }) / inner;
}

// Bytes read plus bytes written per second of a 4 GiB device-to-device copy.
inline double copy_bandwidth() {
  const size_t bytes = size_t{4} << 30;
  void* a = nullptr;
  void* b = nullptr;
  PAGODA_CUDA_CHECK(cudaMalloc(&a, bytes));
  PAGODA_CUDA_CHECK(cudaMalloc(&b, bytes));
  PAGODA_CUDA_CHECK(cudaMemset(a, 1, bytes));
  const double ms = median_ms(5, 5, [&](int) {
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cuda::stream()));
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3);
}

}  // namespace pagoda::bench
