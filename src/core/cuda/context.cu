#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "core/cuda/context.h"
#include "core/cuda/device_storage.h"

namespace pagoda::cuda {
namespace {

struct DeviceState {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t blaslt = nullptr;
  void* workspace = nullptr;
  int multiprocessors = 0;
};

DeviceState& state() {
  static std::array<DeviceState, kMaxDevices> states;
  static std::mutex mutex;
  const int device = current_device_slot();
  DeviceState& s = states[device];
  const std::lock_guard lock(mutex);
  if (s.stream == nullptr) {
    PAGODA_CUDA_CHECK(cudaStreamCreate(&s.stream));
    PAGODA_CUBLAS_CHECK(blaslt().create(&s.blaslt));
    PAGODA_CUDA_CHECK(cudaMalloc(&s.workspace, kBlasltWorkspaceBytes));
    PAGODA_CUDA_CHECK(
        cudaDeviceGetAttribute(&s.multiprocessors, cudaDevAttrMultiProcessorCount, device));
  }
  return s;
}

// What dlerror() says about the last failure, or that it says nothing.
std::string dl_failure() {
  const char* why = dlerror();
  return why != nullptr ? why : "no reason given";
}

template <typename Function>
void resolve(void* library, const char* name, Function& out) {
  void* symbol = dlsym(library, name);
  PAGODA_CHECK(symbol != nullptr, "cuBLASLt has no entry point {}: {}", name, dl_failure());
  out = reinterpret_cast<Function>(symbol);
}

BlasLt load_blaslt() {
  const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process
  PAGODA_CHECK(library != nullptr, "cannot load cuBLASLt ({}): {}", name, dl_failure());
  BlasLt b{};
#define PAGODA_BLASLT_RESOLVE(function, field) resolve(library, #function, b.field);
  PAGODA_BLASLT_ENTRY_POINTS(PAGODA_BLASLT_RESOLVE)
#undef PAGODA_BLASLT_RESOLVE
  return b;
}

}  // namespace

const BlasLt& blaslt() {
  static const BlasLt loaded = load_blaslt();
  return loaded;
}

cudaStream_t stream() {
  return state().stream;
}

cublasLtHandle_t blaslt_handle() {
  return state().blaslt;
}

void* blaslt_workspace() {
  return state().workspace;
}

int current_device_slot() {
  const int device = current_device();
  PAGODA_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index {}", device);
  return device;
}

int multiprocessor_count() {
  return state().multiprocessors;
}

bool env_switch(const char* name) {
  const char* value = std::getenv(name);
  const std::string_view text = value == nullptr ? "1" : value;
  PAGODA_CHECK(text == "0" || text == "1", "{} is 0 or 1, not '{}'", name, text);
  return text == "1";
}

bool has_warpgroup_mma() {
#if PAGODA_CUDA_SM90A
  // Asked at every prefill launch, and while tests are listed, also where there is no device: any
  // failure is a no (not kept), with the runtime's error state cleared; a device's answer is kept.
  static std::array<std::atomic<int>, kMaxDevices> known{};  // 0: not asked, 1: no, 2: yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    (void)cudaGetLastError();
    return false;
  }
  if (const int answer = known[device].load(std::memory_order_relaxed); answer != 0) {
    return answer == 2;
  }
  int major = 0;
  int minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const bool yes = major == 9 && minor == 0;
  known[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
#else
  return false;
#endif
}

bool stream_is_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  PAGODA_CUDA_CHECK(cudaStreamIsCapturing(stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace pagoda::cuda
