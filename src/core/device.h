// Where a tensor's bytes live.
#pragma once

#include <string>

namespace pagoda {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
  std::string to_string() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda" or "cuda:N". Throws Error naming the value.
Device parse_device(const std::string& text);

// True when this binary was built with CUDA support.
bool built_with_cuda();
// CUDA devices visible to this process; 0 without CUDA or without a GPU.
int cuda_device_count();

// While it lives, `device` is the calling thread's current GPU (where kernels and copies of
// tensors without a device of their own go); the previous one is current again after. Nothing for
// the CPU. A thread per GPU rank holds one for its device.
class CurrentDevice {
 public:
  explicit CurrentDevice(Device device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

struct DeviceMemory {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
// Free and total memory of a GPU. Error without CUDA.
DeviceMemory cuda_memory_info(Device device);

}  // namespace pagoda
