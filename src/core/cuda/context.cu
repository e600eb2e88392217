#include <array>
#include <mutex>

#include "core/cuda/context.h"

namespace pagoda::cuda {
namespace {

constexpr int kMaxDevices = 16;

struct DeviceState {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t blaslt = nullptr;
  void* workspace = nullptr;
  int multiprocessors = 0;
};

DeviceState& state() {
  static std::array<DeviceState, kMaxDevices> states;
  static std::mutex mutex;
  int device = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&device));
  PAGODA_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index {}", device);
  DeviceState& s = states[device];
  const std::lock_guard lock(mutex);
  if (s.stream == nullptr) {
    PAGODA_CUDA_CHECK(cudaStreamCreate(&s.stream));
    PAGODA_CUBLAS_CHECK(cublasLtCreate(&s.blaslt));
    PAGODA_CUDA_CHECK(cudaMalloc(&s.workspace, kBlasltWorkspaceBytes));
    PAGODA_CUDA_CHECK(
        cudaDeviceGetAttribute(&s.multiprocessors, cudaDevAttrMultiProcessorCount, device));
  }
  return s;
}

}  // namespace

cudaStream_t stream() {
  return state().stream;
}

cublasLtHandle_t blaslt_handle() {
  return state().blaslt;
}

void* blaslt_workspace() {
  return state().workspace;
}

int multiprocessor_count() {
  return state().multiprocessors;
}

bool stream_is_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  PAGODA_CUDA_CHECK(cudaStreamIsCapturing(stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace pagoda::cuda
