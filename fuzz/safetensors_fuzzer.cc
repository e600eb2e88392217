// A safetensors file (header, offsets, data) and, in a second mode, a checkpoint directory's
// model.safetensors.index.json beside one small valid shard.
#include <filesystem>
#include <fstream>

#include "fuzz/fuzz_util.h"
#include "model/safetensors.h"

using namespace pagoda;

namespace {

// A valid shard holding one F32 tensor "a" of shape [2].
std::string small_shard() {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>(length >> (8 * i));
  return bytes + header + std::string(8, '\0');
}

const std::string& scratch_dir() {
  static const std::string dir = [] {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("pagoda-fuzz-" + std::to_string(getpid())))
            .string();
    std::filesystem::create_directories(path);
    std::ofstream(path + "/shard.safetensors", std::ios::binary) << small_shard();
    return path;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body = fuzz::as_text(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    const fuzz::MemoryFile file(body);
    fuzz::expect_clean_errors([&] {
      const SafetensorsFile opened = SafetensorsFile::open(file.path());
      for (const SafetensorsEntry& entry : opened.entries())
        (void)opened.tensor(entry);
    });
  } else {
    const std::string& dir = scratch_dir();
    std::ofstream(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc)
        << body;
    fuzz::expect_clean_errors([&] {
      const Checkpoint checkpoint = Checkpoint::open(dir);
      for (const std::string& name : checkpoint.names())
        (void)checkpoint.tensor(name);
    });
  }
  return 0;
}
