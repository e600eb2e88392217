// Kernel launches with programmatic dependent launch (sm_90): a kernel queued by launch() may be
// scheduled while the kernel before it on the stream is still running, so its launch latency and
// prologue overlap that kernel's tail, in eager steps and in captured graphs alike.
//
// The contract for a kernel launched this way: it calls wait_for_prior_kernels() before it reads
// or writes any memory an earlier kernel of the stream reads or writes (it may read memory nothing
// on the stream writes, such as weights, before), and release_dependents() after that wait. Since
// the next kernel starts only after this one has passed its wait, at most two kernels overlap.
// Called from a kernel launched the ordinary way, both are no-ops.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/context.h"

namespace pagoda::cuda {

#ifdef __CUDACC__
__device__ __forceinline__ void wait_for_prior_kernels() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void release_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Both, for a kernel with nothing to do before the earlier kernels finish.
__device__ __forceinline__ void start_after_prior_kernels() {
  wait_for_prior_kernels();
  release_dependents();
}
#endif

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t on,
            Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = on;
  config.attrs = &attribute;
  config.numAttrs = 1;
  PAGODA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace pagoda::cuda
