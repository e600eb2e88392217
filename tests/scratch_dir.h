// A fresh directory for one test's files under the test temporary directory, named for the
// process and a count (ctest runs tests in parallel processes), and removed with everything in it
// when the object goes, so a run leaves nothing behind.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace pagoda::testing {

class ScratchDir {
 public:
  explicit ScratchDir(std::string_view name) {
    static int made = 0;
    path_ = ::testing::TempDir() + "pagoda_" + std::string(name) + "_" +
            std::to_string(::getpid()) + "_" + std::to_string(made++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(ScratchDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ScratchDir& operator=(ScratchDir&&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace pagoda::testing
