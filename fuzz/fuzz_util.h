// Helpers shared by the fuzz targets.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/openai_request.h"

namespace pagoda::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; the errors pagoda raises for bad input (Error, ApiError) are the expected outcome.
// Anything else (an InternalError, a crash, a sanitizer report) is a finding.
template <typename Body>
void expect_clean_errors(Body body) {
  try {
    body();
  } catch (const Error&) {
  } catch (const ApiError&) {
  }
}

// A file holding `bytes`, in memory, named by a /proc path, for readers that take a path.
class MemoryFile {
 public:
  explicit MemoryFile(std::string_view bytes) : fd_(memfd_create("fuzz", 0)) {
    size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + written, bytes.size() - written);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace pagoda::fuzz
