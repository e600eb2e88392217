#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda/context.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_storage.h"
#include "core/storage.h"

namespace pagoda::cuda {
namespace {

// Device memory is kept once allocated: a freed block goes back to a per-device list by size and
// the next request of that size takes it, so steady-state steps make no cudaMalloc (which would
// also break CUDA graph capture). Sizes round up to 512 bytes below 1 MiB and to 2 MiB above.
class BlockCache {
 public:
  static BlockCache& instance() {
    static BlockCache* cache = new BlockCache();  // outlives every storage; never destroyed
    return *cache;
  }

  static int64_t rounded(int64_t size) {
    const int64_t unit = size < (int64_t{1} << 20) ? 512 : int64_t{2} << 20;
    return (size + unit - 1) / unit * unit;
  }

  std::byte* take(int64_t size, int device) {
    {
      const std::lock_guard lock(mutex_);
      // During a capture, the capture's own freed scratch first.
      for (auto* list : {&captured_free_, &free_}) {
        auto found = list->find({device, size});
        if (found != list->end() && !found->second.empty()) {
          std::byte* block = found->second.back();
          found->second.pop_back();
          return block;
        }
      }
    }
    PAGODA_CHECK(!stream_is_capturing(), "a new {}-byte device allocation during graph capture",
                 size);
    void* pointer = nullptr;
    cudaError_t status = cudaMalloc(&pointer, size);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_all(device);  // cached blocks of other sizes may make room
      status = cudaMalloc(&pointer, size);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      fail("cannot allocate {} bytes on cuda:{}: {}", size, device, cudaGetErrorString(status));
    }
    return static_cast<std::byte*>(pointer);
  }

  // A block freed during a capture is the capture's scratch: later allocations of the same
  // capture may reuse it (replays run in stream order as the eager run did), nothing else until
  // the graph gives it back.
  void give_back(std::byte* block, int64_t size, int device) {
    // Never throws: it runs in destructors.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const bool capturing = cudaStreamIsCapturing(stream(), &status) == cudaSuccess &&
                           status != cudaStreamCaptureStatusNone;
    const std::lock_guard lock(mutex_);
    (capturing ? captured_free_ : free_)[{device, size}].push_back(block);
  }

  std::vector<DeviceBlock> take_captured() {
    const std::lock_guard lock(mutex_);
    std::vector<DeviceBlock> blocks;
    for (const auto& [key, list] : captured_free_) {
      for (std::byte* block : list)
        blocks.push_back({block, key.second, key.first});
    }
    captured_free_.clear();
    return blocks;
  }

 private:
  void release_all(int device) {
    const std::lock_guard lock(mutex_);
    PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [key, blocks] : free_) {
      if (key.first != device) continue;
      for (std::byte* block : blocks)
        cudaFree(block);
      blocks.clear();
    }
  }

  std::mutex mutex_;
  std::map<std::pair<int, int64_t>, std::vector<std::byte*>> free_;
  // Freed during the capture in progress.
  std::map<std::pair<int, int64_t>, std::vector<std::byte*>> captured_free_;
};

class DeviceStorage final : public Storage {
 public:
  DeviceStorage(int64_t size_bytes, int device_index, bool zero)
      : size_(size_bytes), index_(device_index) {
    if (size_ == 0) return;
    int count = 0;
    PAGODA_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device_index < 0 || device_index >= count) {
      fail("device cuda:{} does not exist; this machine has {} CUDA device(s)", device_index,
           count);
    }
    PAGODA_CUDA_CHECK(cudaSetDevice(device_index));
    data_ = BlockCache::instance().take(BlockCache::rounded(size_), device_index);
    if (zero) PAGODA_CUDA_CHECK(cudaMemsetAsync(data_, 0, size_, stream()));
  }
  ~DeviceStorage() override {
    if (data_ != nullptr) {
      BlockCache::instance().give_back(data_, BlockCache::rounded(size_), index_);
    }
  }
  std::byte* data() override { return data_; }
  int64_t size_bytes() const override { return size_; }
  Device device() const override { return Device::cuda(index_); }
  bool writable() const override { return true; }

 private:
  std::byte* data_ = nullptr;
  int64_t size_;
  int index_;
};

__device__ int64_t element_offset(const StridedLayout& layout, int64_t linear) {
  int64_t offset = 0;
  for (int d = layout.num_dims - 1; d >= 0; --d) {
    const int64_t index = linear % layout.shape[d];
    linear /= layout.shape[d];
    offset += index * layout.strides[d];
  }
  return offset;
}

template <typename T>
__global__ void strided_copy_kernel(T* dst, StridedLayout dst_layout, const T* src,
                                    StridedLayout src_layout, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[element_offset(dst_layout, i)] = src[element_offset(src_layout, i)];
  }
}

template <typename T>
__global__ void strided_fill_kernel(T* dst, StridedLayout layout, T value, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[element_offset(layout, i)] = value;
  }
}

int64_t element_count(const StridedLayout& layout) {
  int64_t count = 1;
  for (int d = 0; d < layout.num_dims; ++d)
    count *= layout.shape[d];
  return count;
}

constexpr int kThreads = 256;

int grid_for(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 ? blocks : 65535);
}

template <typename T>
void launch_copy(std::byte* dst, const StridedLayout& dst_layout, const std::byte* src,
                 const StridedLayout& src_layout, int64_t count) {
  strided_copy_kernel<T><<<grid_for(count), kThreads, 0, stream()>>>(
      reinterpret_cast<T*>(dst), dst_layout, reinterpret_cast<const T*>(src), src_layout, count);
}

template <typename T>
void launch_fill(std::byte* dst, const StridedLayout& layout, uint64_t pattern, int64_t count) {
  strided_fill_kernel<T><<<grid_for(count), kThreads, 0, stream()>>>(
      reinterpret_cast<T*>(dst), layout, static_cast<T>(pattern), count);
}

// Calls launch(T{}) with the unsigned integer type of `element_size` bytes.
template <typename Launch>
void with_element_type(int element_size, Launch&& launch) {
  switch (element_size) {
    case 1:
      return launch(uint8_t{});
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    case 8:
      return launch(uint64_t{});
  }
  PAGODA_CHECK(false, "unsupported element size {}", element_size);
}

}  // namespace

bool available_in_build() {
  return true;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a machine without a driver
    return 0;
  }
  return count;
}

void profile_range(bool open) {
  // Without a profiler attached these return an error, cleared here; they change nothing.
  if ((open ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) cudaGetLastError();
}

int current_device() {
  int device = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_current_device(int device_index) {
  PAGODA_CUDA_CHECK(cudaSetDevice(device_index));
}

std::pair<int64_t, int64_t> memory_info(int device_index) {
  PAGODA_CUDA_CHECK(cudaSetDevice(device_index));
  size_t free = 0;
  size_t total = 0;
  PAGODA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

std::shared_ptr<Storage> allocate_device(int64_t size_bytes, int device_index, bool zero) {
  return std::make_shared<DeviceStorage>(size_bytes, device_index, zero);
}

void copy_bytes(std::byte* dst, Device dst_device, const std::byte* src, Device src_device,
                int64_t size) {
  if (!dst_device.is_cpu() && !src_device.is_cpu()) {
    // Device to device stays on the engine stream (and in a graph being captured).
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  // With the host: a blocking copy, which orders after the engine stream's queued work.
  PAGODA_CUDA_CHECK(cudaMemcpy(dst, src, size, cudaMemcpyDefault));
}

std::vector<DeviceBlock> take_captured_frees() {
  return BlockCache::instance().take_captured();
}

void release_blocks(const std::vector<DeviceBlock>& blocks) {
  for (const DeviceBlock& block : blocks)
    BlockCache::instance().give_back(block.data, block.size, block.device);
}

void strided_copy(std::byte* dst, const StridedLayout& dst_layout, const std::byte* src,
                  const StridedLayout& src_layout, int element_size, int device_index) {
  const int64_t count = element_count(dst_layout);
  if (count == 0) return;
  PAGODA_CUDA_CHECK(cudaSetDevice(device_index));
  with_element_type(element_size, [&](auto element) {
    launch_copy<decltype(element)>(dst, dst_layout, src, src_layout, count);
  });
  PAGODA_CUDA_CHECK(cudaGetLastError());
}

void strided_fill(std::byte* dst, const StridedLayout& layout, uint64_t pattern, int element_size,
                  int device_index) {
  const int64_t count = element_count(layout);
  if (count == 0) return;
  PAGODA_CUDA_CHECK(cudaSetDevice(device_index));
  with_element_type(element_size, [&](auto element) {
    launch_fill<decltype(element)>(dst, layout, pattern, count);
  });
  PAGODA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace pagoda::cuda
