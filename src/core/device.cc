#include "core/device.h"

#include "core/cuda/device_storage.h"
#include "core/error.h"

namespace pagoda {

std::string Device::to_string() const {
  return type == DeviceType::kCpu ? "cpu" : "cuda:" + std::to_string(index);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    const std::string digits = text.substr(5);
    if (!digits.empty() && digits.size() <= 4 &&
        digits.find_first_not_of("0123456789") == std::string::npos) {
      return Device::cuda(std::stoi(digits));
    }
  }
  fail("unknown device '{}'; expected cpu, cuda or cuda:N", text);
}

CurrentDevice::CurrentDevice(Device device) {
  if (device.is_cpu()) return;
  previous_ = cuda::current_device();
  cuda::set_current_device(device.index);
}

CurrentDevice::~CurrentDevice() {
  if (previous_ < 0) return;
  try {
    cuda::set_current_device(previous_);
  } catch (...) {
    // A destructor does not throw; the device stays as it was set.
  }
}

bool built_with_cuda() {
  return cuda::available_in_build();
}

int cuda_device_count() {
  return cuda::device_count();
}

DeviceMemory cuda_memory_info(Device device) {
  const auto [free, total] = cuda::memory_info(device.index);
  return {free, total};
}

}  // namespace pagoda
