// Device memory and copies. Implemented in device_storage.cu when CUDA is built; otherwise every
// call fails with an error saying this binary was built without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/device.h"

namespace pagoda {
class Storage;
}

namespace pagoda::cuda {

constexpr int kMaxDims = 8;

// Shape and element strides of a strided tensor, passed by value to kernels.
struct StridedLayout {
  int num_dims = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

bool available_in_build();
int device_count();  // 0 when no device or driver is present
// Opens (true) or closes a range a profiler started with collection off records (ncu
// --profile-from-start off): around a benchmark's timed iterations. Nothing without CUDA or a
// profiler.
void profile_range(bool open);
// The calling thread's current GPU, and setting it.
int current_device();
void set_current_device(int device_index);
// Free and total bytes of GPU `device_index`.
std::pair<int64_t, int64_t> memory_info(int device_index);

// Device memory on GPU `device_index`, zero-filled (on the engine stream) when `zero`.
std::shared_ptr<Storage> allocate_device(int64_t size_bytes, int device_index, bool zero);

// A block of device memory as the allocator's cache holds it.
struct DeviceBlock {
  std::byte* data = nullptr;
  int64_t size = 0;
  int device = 0;
};

// Device blocks freed while the engine stream is capturing a CUDA graph are the graph's scratch:
// its replays write them, so they stay out of the cache (and out of every later allocation) until
// the graph is destroyed. Returns the blocks freed during the capture now ending, for the graph to
// hold; release_blocks() gives them back to the cache.
std::vector<DeviceBlock> take_captured_frees();
void release_blocks(const std::vector<DeviceBlock>& blocks);

// Copies bytes where at least one side is device memory: device to device on the engine stream,
// to or from the host synchronously.
void copy_bytes(std::byte* dst, Device dst_device, const std::byte* src, Device src_device,
                int64_t size);

// Elementwise copy between two device tensors of the same shape; element size 1, 2, 4 or 8 bytes.
// Queued on the engine stream, as is strided_fill.
void strided_copy(std::byte* dst, const StridedLayout& dst_layout, const std::byte* src,
                  const StridedLayout& src_layout, int element_size, int device_index);

// Writes the `element_size`-byte pattern to every element of a device tensor.
void strided_fill(std::byte* dst, const StridedLayout& layout, uint64_t pattern, int element_size,
                  int device_index);

}  // namespace pagoda::cuda
