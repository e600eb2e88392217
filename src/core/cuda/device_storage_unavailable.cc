// Compiled instead of device_storage.cu when this build has no CUDA compiler.
#include "core/cuda/device_storage.h"
#include "core/error.h"

namespace pagoda::cuda {
namespace {

[[noreturn]] void no_cuda() {
  fail(
      "this pagoda binary was built without CUDA; rebuild with nvcc available to use cuda devices");
}

}  // namespace

bool available_in_build() {
  return false;
}

int device_count() {
  return 0;
}

void profile_range(bool) {}

int current_device() {
  no_cuda();
}

void set_current_device(int) {
  no_cuda();
}

std::pair<int64_t, int64_t> memory_info(int) {
  no_cuda();
}

std::shared_ptr<Storage> allocate_device(int64_t, int, bool) {
  no_cuda();
}

void copy_bytes(std::byte*, Device, const std::byte*, Device, int64_t) {
  no_cuda();
}

void strided_copy(std::byte*, const StridedLayout&, const std::byte*, const StridedLayout&, int,
                  int) {
  no_cuda();
}

void strided_fill(std::byte*, const StridedLayout&, uint64_t, int, int) {
  no_cuda();
}

}  // namespace pagoda::cuda
