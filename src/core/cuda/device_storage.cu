#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_storage.h"
#include "core/storage.h"

namespace pagoda::cuda {
namespace {

class DeviceStorage final : public Storage {
 public:
  DeviceStorage(int64_t size_bytes, int device_index) : size_(size_bytes), index_(device_index) {
    if (size_ == 0) return;
    int count = 0;
    PAGODA_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (device_index < 0 || device_index >= count) {
      fail("device cuda:{} does not exist; this machine has {} CUDA device(s)", device_index,
           count);
    }
    PAGODA_CUDA_CHECK(cudaSetDevice(device_index));
    void* pointer = nullptr;
    const cudaError_t status = cudaMalloc(&pointer, size_);
    if (status != cudaSuccess) {
      fail("cannot allocate {} bytes on cuda:{}: {}", size_, device_index,
           cudaGetErrorString(status));
    }
    data_ = static_cast<std::byte*>(pointer);
    PAGODA_CUDA_CHECK(cudaMemset(data_, 0, size_));
  }
  ~DeviceStorage() override {
    if (data_ != nullptr) {
      cudaSetDevice(index_);
      cudaFree(data_);
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
  strided_copy_kernel<T><<<grid_for(count), kThreads>>>(
      reinterpret_cast<T*>(dst), dst_layout, reinterpret_cast<const T*>(src), src_layout, count);
}

template <typename T>
void launch_fill(std::byte* dst, const StridedLayout& layout, uint64_t pattern, int64_t count) {
  strided_fill_kernel<T><<<grid_for(count), kThreads>>>(reinterpret_cast<T*>(dst), layout,
                                                        static_cast<T>(pattern), count);
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

std::shared_ptr<Storage> allocate_device(int64_t size_bytes, int device_index) {
  return std::make_shared<DeviceStorage>(size_bytes, device_index);
}

void copy_bytes(std::byte* dst, Device dst_device, const std::byte* src, Device src_device,
                int64_t size) {
  PAGODA_CUDA_CHECK(cudaMemcpy(dst, src, size, cudaMemcpyDefault));
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
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
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
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace pagoda::cuda
