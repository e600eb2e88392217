// Byte buffers behind tensors: aligned host memory, read-only file mappings, device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"

namespace pagoda {

// Owns (or maps) a contiguous range of bytes on one device. Tensors share it through shared_ptr.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual std::byte* data() = 0;  // nullptr only when size_bytes() == 0
  virtual int64_t size_bytes() const = 0;
  virtual Device device() const = 0;
  virtual bool writable() const = 0;
};

constexpr int64_t kHostAlignment = 64;

// Zero-filled host memory aligned to kHostAlignment bytes.
std::shared_ptr<Storage> allocate_host(int64_t size_bytes);

// Maps a whole file read-only. Throws Error naming the path and the system error.
std::shared_ptr<Storage> map_file_read_only(const std::string& path);

// Zero-filled memory on `device`. Throws Error when the device is unavailable or memory runs out.
std::shared_ptr<Storage> allocate(int64_t size_bytes, Device device);
// The same without the zero fill on a device (host memory is still zeroed): for outputs whose
// every element is written before it is read.
std::shared_ptr<Storage> allocate_uninitialized(int64_t size_bytes, Device device);

// Copies `size` bytes between any two storages (host or device).
void copy_bytes(Storage& dst, int64_t dst_offset, Storage& src, int64_t src_offset, int64_t size);

}  // namespace pagoda
