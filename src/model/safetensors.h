// safetensors files (the Hugging Face weight format), read through a read-only mapping.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON mapping tensor names to
// {dtype, shape, data_offsets: [begin, end]} (offsets relative to the data area after the header),
// then the data. Everything is validated before any tensor is viewed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pagoda {

constexpr int64_t kMaxSafetensorsHeaderBytes = 100 << 20;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t begin = 0;  // byte offsets in the data area
  int64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws Error naming the file, the tensor and the numbers.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // A read-only view of the entry's bytes as a tensor of its dtype and shape.
  Tensor tensor(const SafetensorsEntry& entry) const;

 private:
  std::string path_;
  std::shared_ptr<Storage> storage_;
  int64_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
};

// All tensors of a checkpoint directory: model.safetensors, or the shards listed in
// model.safetensors.index.json. Throws Error when neither exists, a shard is missing, a name
// appears twice, or the index and a shard disagree.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& model_dir);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor and the file it came from; throws Error naming the tensor when absent.
  const Tensor& tensor(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  std::vector<std::string> names() const;
  int64_t total_bytes() const;

 private:
  struct Stored {
    Tensor tensor;
    std::string file;
  };
  std::string dir_;
  std::map<std::string, Stored> tensors_;
};

// A checkpoint tensor holding NaN or infinite values: how many, and the first one's flat index.
struct NonFiniteTensor {
  std::string name;
  int64_t count = 0;
  int64_t first = 0;
};
// Every floating-point tensor of `checkpoint` with NaN or infinite values, in name order.
std::vector<NonFiniteTensor> find_non_finite(const Checkpoint& checkpoint);

// Parses a safetensors dtype string ("F32", "BF16", "I64", ...). Throws Error for types pagoda
// does not load (F64, I8, BOOL, F8_E4M3, ...), naming the type.
DType parse_safetensors_dtype(const std::string& name);

}  // namespace pagoda
