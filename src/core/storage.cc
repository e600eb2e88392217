#include "core/storage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/cuda/device_storage.h"
#include "core/error.h"

namespace pagoda {
namespace {

// Small buffers come from aligned_alloc; large ones are anonymous mappings, which the kernel
// zero-fills lazily (no separate memset pass) and may back with huge pages.
class HostStorage final : public Storage {
 public:
  explicit HostStorage(int64_t size_bytes) : size_(size_bytes) {
    if (size_ == 0) return;
    if (size_ >= kMappedThreshold) {
      void* mapped =
          ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mapped == MAP_FAILED) fail("cannot allocate {} bytes of host memory", size_);
      ::madvise(mapped, size_, MADV_HUGEPAGE);
      data_ = static_cast<std::byte*>(mapped);
      mapped_ = true;
      return;
    }
    const int64_t rounded = (size_ + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    data_ = static_cast<std::byte*>(std::aligned_alloc(kHostAlignment, rounded));
    if (data_ == nullptr) fail("cannot allocate {} bytes of host memory", size_);
    std::memset(data_, 0, rounded);
  }
  ~HostStorage() override {
    if (mapped_) {
      ::munmap(data_, size_);
    } else {
      std::free(data_);
    }
  }
  std::byte* data() override { return data_; }
  int64_t size_bytes() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  bool writable() const override { return true; }

 private:
  static constexpr int64_t kMappedThreshold = int64_t{1} << 20;
  std::byte* data_ = nullptr;
  int64_t size_;
  bool mapped_ = false;
};

class MappedFileStorage final : public Storage {
 public:
  explicit MappedFileStorage(const std::string& path) {
    // Non-blocking, so a FIFO in a checkpoint fails below instead of waiting for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot stat '{}': {}", path, std::strerror(err));
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      fail("'{}' is not a regular file", path);
    }
    size_ = info.st_size;
    if (size_ > 0) {
      void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        fail("cannot map '{}' ({} bytes): {}", path, size_, std::strerror(err));
      }
      data_ = static_cast<std::byte*>(mapped);
    }
    ::close(fd);
  }
  ~MappedFileStorage() override {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  std::byte* data() override { return data_; }
  int64_t size_bytes() const override { return size_; }
  Device device() const override { return Device::cpu(); }
  bool writable() const override { return false; }

 private:
  std::byte* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace

std::shared_ptr<Storage> allocate_host(int64_t size_bytes) {
  if (size_bytes < 0) fail("cannot allocate a negative size ({} bytes)", size_bytes);
  return std::make_shared<HostStorage>(size_bytes);
}

std::shared_ptr<Storage> map_file_read_only(const std::string& path) {
  return std::make_shared<MappedFileStorage>(path);
}

std::shared_ptr<Storage> allocate(int64_t size_bytes, Device device) {
  if (device.is_cpu()) return allocate_host(size_bytes);
  if (size_bytes < 0) fail("cannot allocate a negative size ({} bytes)", size_bytes);
  return cuda::allocate_device(size_bytes, device.index, /*zero=*/true);
}

std::shared_ptr<Storage> allocate_uninitialized(int64_t size_bytes, Device device) {
  if (device.is_cpu()) return allocate_host(size_bytes);
  if (size_bytes < 0) fail("cannot allocate a negative size ({} bytes)", size_bytes);
  return cuda::allocate_device(size_bytes, device.index, /*zero=*/false);
}

void copy_bytes(Storage& dst, int64_t dst_offset, Storage& src, int64_t src_offset, int64_t size) {
  PAGODA_CHECK(size >= 0 && dst_offset >= 0 && src_offset >= 0, "negative copy range");
  PAGODA_CHECK(dst_offset + size <= dst.size_bytes(), "copy past the end of the destination");
  PAGODA_CHECK(src_offset + size <= src.size_bytes(), "copy past the end of the source");
  if (size == 0) return;
  if (!dst.writable()) fail("cannot write to read-only storage");
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memmove(dst.data() + dst_offset, src.data() + src_offset, size);
    return;
  }
  cuda::copy_bytes(dst.data() + dst_offset, dst.device(), src.data() + src_offset, src.device(),
                   size);
}

}  // namespace pagoda
