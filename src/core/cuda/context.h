// Per-device CUDA state shared by every kernel launch: the engine's stream, the cuBLASLt handle and
// its workspace. Created on first use for the current device and kept for the process.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "core/cuda/cuda_check.h"

#define PAGODA_CUBLAS_CHECK(call)                                                       \
  do {                                                                                  \
    const cublasStatus_t pagoda_status_ = (call);                                       \
    if (pagoda_status_ != CUBLAS_STATUS_SUCCESS) {                                      \
      ::pagoda::fail("cuBLAS call '{}' failed at {}:{}: {}", #call, __FILE__, __LINE__, \
                     cublasLtGetStatusString(pagoda_status_));                          \
    }                                                                                   \
  } while (0)

// Checks the launch that just happened (bad configuration, missing kernel image).
#define PAGODA_CUDA_CHECK_LAUNCH() PAGODA_CUDA_CHECK(cudaGetLastError())

namespace pagoda::cuda {

// The stream every pagoda kernel and cuBLASLt call on the current device is queued on. It is a
// blocking stream, so plain cudaMemcpy on the legacy default stream orders after its work.
cudaStream_t stream();

cublasLtHandle_t blaslt_handle();
// Scratch memory for cuBLASLt on the current device.
void* blaslt_workspace();
constexpr size_t kBlasltWorkspaceBytes = size_t{32} << 20;

// Multiprocessors of the current device.
int multiprocessor_count();

// True while stream() is being captured into a CUDA graph: host synchronisation is forbidden.
bool stream_is_capturing();

}  // namespace pagoda::cuda
