#include "model/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"

namespace pagoda {
namespace {

int64_t read_header_length(const std::string& path, Storage& storage) {
  const int64_t size = storage.size_bytes();
  if (size < 8)
    fail("{}: file is {} bytes, shorter than the 8-byte safetensors header length", path, size);
  uint64_t length = 0;
  std::memcpy(&length, storage.data(), 8);  // little-endian on every supported host
  if (length > static_cast<uint64_t>(size - 8)) {
    fail("{}: header length {} exceeds the {} bytes after the length field", path, length,
         size - 8);
  }
  if (length > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    fail("{}: header length {} is over the {}-byte limit", path, length,
         kMaxSafetensorsHeaderBytes);
  }
  return static_cast<int64_t>(length);
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name,
                             const nlohmann::json& value, int64_t data_size) {
  if (!value.is_object()) fail("{}: tensor '{}' is not a JSON object", path, name);
  SafetensorsEntry entry;
  entry.name = name;
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    fail("{}: tensor '{}' has no dtype string", path, name);
  }
  try {
    entry.dtype = parse_safetensors_dtype(dtype->get<std::string>());
  } catch (const Error& error) {
    fail("{}: tensor '{}': {}", path, name, error.what());
  }
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array())
    fail("{}: tensor '{}' has no shape list", path, name);
  // Element count with overflow checks: every dim is a non-negative integer.
  int64_t numel = 1;
  for (const nlohmann::json& dim : *shape) {
    if (!dim.is_number_unsigned() && !(dim.is_number_integer() && dim.get<int64_t>() >= 0)) {
      fail("{}: tensor '{}' has shape {}; dims must be non-negative integers", path, name,
           shape->dump());
    }
    const uint64_t extent = dim.get<uint64_t>();
    if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (numel != 0 && extent != 0 &&
         static_cast<uint64_t>(numel) > static_cast<uint64_t>(data_size) / extent)) {
      fail("{}: tensor '{}' has shape {}, larger than the {}-byte data area", path, name,
           shape->dump(), data_size);
    }
    entry.shape.push_back(static_cast<int64_t>(extent));
    numel *= static_cast<int64_t>(extent);
  }
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    fail("{}: tensor '{}' needs data_offsets [begin, end] of non-negative integers", path, name);
  }
  const uint64_t begin = (*offsets)[0].get<uint64_t>();
  const uint64_t end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > static_cast<uint64_t>(data_size)) {
    fail("{}: tensor '{}' has data_offsets [{}, {}] outside the {}-byte data area", path, name,
         begin, end, data_size);
  }
  entry.begin = static_cast<int64_t>(begin);
  entry.end = static_cast<int64_t>(end);
  const int64_t expected = numel * dtype_size(entry.dtype);
  if (entry.end - entry.begin != expected) {
    fail("{}: tensor '{}' ({} {}) needs {} bytes but its data_offsets [{}, {}] span {}", path, name,
         dtype->get<std::string>(), shape->dump(), expected, begin, end, end - begin);
  }
  return entry;
}

void check_no_overlap(const std::string& path, std::vector<SafetensorsEntry> entries) {
  // A tensor of no elements holds no bytes, so it overlaps nothing (the format allows them).
  std::erase_if(entries, [](const SafetensorsEntry& entry) { return entry.begin == entry.end; });
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    const SafetensorsEntry& previous = entries[i - 1];
    if (entries[i].begin < previous.end) {
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path, previous.name,
           previous.begin, previous.end, entries[i].name, entries[i].begin, entries[i].end);
    }
  }
}

}  // namespace

DType parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "I64") return DType::kI64;
  if (name == "I32") return DType::kI32;
  if (name == "U8") return DType::kU8;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  fail("dtype '{}' is not supported; pagoda loads F32, F16, BF16, F8_E4M3, I64, I32 and U8 tensors",
       name);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  file.storage_ = map_file_read_only(path);
  const int64_t header_length = read_header_length(path, *file.storage_);
  file.data_offset_ = 8 + header_length;
  const int64_t data_size = file.storage_->size_bytes() - file.data_offset_;
  const char* header = reinterpret_cast<const char*>(file.storage_->data() + 8);
  check_json_depth(std::string_view(header, header_length), path + " header");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header, header + header_length);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: malformed JSON header ({} bytes): {}", path, header_length,
         describe_json_error(error));
  }
  if (!json.is_object()) fail("{}: the header is not a JSON object", path);
  for (const auto& [name, value] : json.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail("{}: __metadata__ is not a JSON object", path);
      continue;
    }
    file.entries_.push_back(parse_entry(path, name, value, data_size));
  }
  check_no_overlap(path, file.entries_);
  return file;
}

Tensor SafetensorsFile::tensor(const SafetensorsEntry& entry) const {
  return Tensor::from_storage(storage_, entry.dtype, entry.shape, contiguous_strides(entry.shape),
                              data_offset_ + entry.begin);
}

Checkpoint Checkpoint::open(const std::string& model_dir) {
  Checkpoint checkpoint;
  checkpoint.dir_ = model_dir;
  const std::string single = model_dir + "/model.safetensors";
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> expected_file;  // from the index
  std::vector<std::string> files;
  if (path_exists(index_path)) {
    const nlohmann::json index = read_json_file(index_path);
    const auto map = index.find("weight_map");
    if (!index.is_object() || map == index.end() || !map->is_object()) {
      fail("{}: needs a weight_map object", index_path);
    }
    for (const auto& [name, file] : map->items()) {
      if (!file.is_string()) fail("{}: weight_map['{}'] is not a file name", index_path, name);
      const std::string shard = file.get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "..") {
        fail("{}: weight_map['{}'] names '{}', not a file in the directory", index_path, name,
             shard);
      }
      expected_file[name] = shard;
      if (std::find(files.begin(), files.end(), shard) == files.end()) files.push_back(shard);
    }
  } else if (path_exists(single)) {
    files.push_back("model.safetensors");
  } else {
    fail("{} holds neither model.safetensors nor model.safetensors.index.json", model_dir);
  }
  for (const std::string& name : files) {
    const SafetensorsFile file = SafetensorsFile::open(model_dir + "/" + name);
    for (const SafetensorsEntry& entry : file.entries()) {
      if (checkpoint.tensors_.count(entry.name) != 0) {
        fail("tensor '{}' appears in both {} and {}", entry.name,
             checkpoint.tensors_.at(entry.name).file, file.path());
      }
      const auto indexed = expected_file.find(entry.name);
      if (!expected_file.empty() && (indexed == expected_file.end() || indexed->second != name)) {
        fail("{}: tensor '{}' is not listed for this shard in {}", file.path(), entry.name,
             index_path);
      }
      checkpoint.tensors_[entry.name] = {file.tensor(entry), file.path()};
    }
  }
  for (const auto& [name, shard] : expected_file) {
    if (checkpoint.tensors_.count(name) == 0) {
      fail("{} lists tensor '{}' in {}, which does not contain it", index_path, name, shard);
    }
  }
  return checkpoint;
}

const Tensor& Checkpoint::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("checkpoint {} has no tensor '{}'", dir_, name);
  return it->second.tensor;
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("checkpoint {} has no tensor '{}'", dir_, name);
  return it->second.file;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  for (const auto& [name, stored] : tensors_)
    names.push_back(name);
  return names;
}

int64_t Checkpoint::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, stored] : tensors_)
    total += stored.tensor.numel() * stored.tensor.element_size();
  return total;
}

std::vector<NonFiniteTensor> find_non_finite(const Checkpoint& checkpoint) {
  std::vector<NonFiniteTensor> found;
  for (const std::string& name : checkpoint.names()) {
    const Tensor& tensor = checkpoint.tensor(name);
    const int64_t n = tensor.numel();
    // NaN and the infinities are the values whose exponent bits are all ones (e4m3 has no
    // infinities: its NaN is every bit but the sign). A tensor's data need not be aligned in the
    // file, so each value's bits are copied out.
    const auto scan = [&]<typename Bits>(Bits, auto non_finite) {
      const std::byte* data = tensor.raw_data();
      NonFiniteTensor bad{.name = name};
      for (int64_t i = 0; i < n; ++i) {
        Bits bits;
        std::memcpy(&bits, data + i * sizeof(Bits), sizeof(Bits));
        if (non_finite(bits) && bad.count++ == 0) bad.first = i;
      }
      if (bad.count > 0) found.push_back(std::move(bad));
    };
    switch (tensor.dtype()) {
      case DType::kF32:
        scan(uint32_t{}, [](uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u; });
        break;
      case DType::kBF16:
        scan(uint16_t{}, [](uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u; });
        break;
      case DType::kF16:
        scan(uint16_t{}, [](uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u; });
        break;
      case DType::kF8E4M3:
        scan(uint8_t{}, [](uint8_t bits) { return (bits & 0x7Fu) == 0x7Fu; });
        break;
      default:
        break;  // integer tensors hold no NaN
    }
  }
  return found;
}

}  // namespace pagoda
