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
                     ::pagoda::cuda::blaslt().get_status_string(pagoda_status_));       \
    }                                                                                   \
  } while (0)

// Checks the launch that just happened (bad configuration, missing kernel image).
#define PAGODA_CUDA_CHECK_LAUNCH() PAGODA_CUDA_CHECK(cudaGetLastError())

namespace pagoda::cuda {

// cuBLASLt's entry points, resolved from libcublasLt.so.<major> the first time a product needs
// them instead of linked: the library's static initialisation costs every process that links it
// about 0.4 s at start-up, CPU-only runs and each test process included. One list gives the
// struct its fields and the loader its lookups.
#define PAGODA_BLASLT_ENTRY_POINTS(X)                                      \
  X(cublasLtCreate, create)                                                \
  X(cublasLtGetStatusString, get_status_string)                            \
  X(cublasLtMatmul, matmul)                                                \
  X(cublasLtMatmulAlgoGetHeuristic, matmul_algo_get_heuristic)             \
  X(cublasLtMatmulDescCreate, matmul_desc_create)                          \
  X(cublasLtMatmulDescDestroy, matmul_desc_destroy)                        \
  X(cublasLtMatmulDescSetAttribute, matmul_desc_set_attribute)             \
  X(cublasLtMatmulPreferenceCreate, matmul_preference_create)              \
  X(cublasLtMatmulPreferenceDestroy, matmul_preference_destroy)            \
  X(cublasLtMatmulPreferenceSetAttribute, matmul_preference_set_attribute) \
  X(cublasLtMatrixLayoutCreate, matrix_layout_create)                      \
  X(cublasLtMatrixLayoutDestroy, matrix_layout_destroy)

struct BlasLt {
#define PAGODA_BLASLT_FIELD(function, field) decltype(&function) field;
  PAGODA_BLASLT_ENTRY_POINTS(PAGODA_BLASLT_FIELD)
#undef PAGODA_BLASLT_FIELD
};
// Loaded once per process; an Error names the library or the entry point that is missing.
const BlasLt& blaslt();

// The stream every pagoda kernel and cuBLASLt call on the current device is queued on. It is a
// blocking stream, so plain cudaMemcpy on the legacy default stream orders after its work.
cudaStream_t stream();

cublasLtHandle_t blaslt_handle();
// Scratch memory for cuBLASLt on the current device.
void* blaslt_workspace();
constexpr size_t kBlasltWorkspaceBytes = size_t{32} << 20;

// Devices pagoda keeps per-device state for, and the current device's index into such state
// (checked to be below kMaxDevices).
constexpr int kMaxDevices = 16;
int current_device_slot();

// Multiprocessors of the current device.
int multiprocessor_count();

// Whether kernels built on Hopper's warpgroup products (wgmma) run here: the build has sm_90a code
// (CMAKE_CUDA_ARCHITECTURES holds 90a, the default) and the current device is compute
// capability 9.0. False without a device.
bool has_warpgroup_mma();

// True while stream() is being captured into a CUDA graph: host synchronisation is forbidden.
bool stream_is_capturing();

// An on/off switch of the environment, for timing one binary both ways: on where `name` is unset
// or 1, off where it is 0; InternalError for any other value. Read at every call: callers keep
// the answer.
bool env_switch(const char* name);

}  // namespace pagoda::cuda
