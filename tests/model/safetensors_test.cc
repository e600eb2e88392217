#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "scratch_dir.h"

namespace pagoda {
namespace {

using testing::ScratchDir;

// Writes a safetensors file from a header and raw data (the header length is computed unless
// `length_override` is given).
void write_file(const std::string& path, const std::string& header, const std::string& data,
                std::optional<uint64_t> length_override = std::nullopt) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = length_override.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << data;
}

std::string float_bytes(std::initializer_list<float> values) {
  std::string bytes;
  for (float v : values)
    bytes.append(reinterpret_cast<const char*>(&v), 4);
  return bytes;
}

// Expects SafetensorsFile::open to fail with every fragment in its message.
void expect_open_error(const std::string& path, const std::vector<std::string>& fragments) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "expected an error for " << path;
  } catch (const Error& error) {
    for (const std::string& fragment : fragments) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
          << "'" << error.what() << "' lacks '" << fragment << "'";
    }
  }
}

TEST(SafetensorsTest, ReadsTensors) {
  const ScratchDir scratch("st_ok");
  const std::string path = scratch.file("model.safetensors");
  const nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"a", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
      {"b", {{"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {16, 20}}}},
      {"empty", {{"dtype", "F16"}, {"shape", {0, 3}}, {"data_offsets", {20, 20}}}}};
  std::string data = float_bytes({1, 2, 3, 4});
  const uint16_t bf16[] = {0x3f80, 0xc000};
  data.append(reinterpret_cast<const char*>(bf16), 4);
  write_file(path, header.dump(), data);
  const SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.entries().size(), 3u);
  for (const SafetensorsEntry& entry : file.entries()) {
    const Tensor t = file.tensor(entry);
    if (entry.name == "a") {
      EXPECT_EQ(t.shape(), (Shape{2, 2}));
      float value;
      std::memcpy(&value, t.raw_data() + 12, 4);
      EXPECT_EQ(value, 4.0f);
    } else if (entry.name == "b") {
      EXPECT_EQ(t.dtype(), DType::kBF16);
      uint16_t bits;
      std::memcpy(&bits, t.raw_data() + 2, 2);
      EXPECT_EQ(bf16_to_f32(bits), -2.0f);
    } else {
      EXPECT_EQ(t.numel(), 0);
    }
  }
}

TEST(SafetensorsTest, MalformedFilesAreClearErrors) {
  const ScratchDir scratch("st_bad");
  const std::string& dir = scratch.path();
  const std::string data = float_bytes({1, 2, 3, 4});
  auto header_with = [](const nlohmann::json& a) { return nlohmann::json{{"a", a}}.dump(); };
  const nlohmann::json good = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}};
  struct Case {
    const char* label;
    std::string header;
    std::string data;
    std::optional<uint64_t> length;
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {"huge header length",
       header_with(good),
       data,
       uint64_t{1} << 60,
       {"header length 1152921504606846976", "exceeds"}},
      {"truncated data",
       header_with(good),
       data.substr(0, 10),
       std::nullopt,
       {"'a'", "[0, 16]", "outside the 10-byte data area"}},
      {"not JSON", "{\"a\": [", data, std::nullopt, {"malformed JSON header"}},
      {"not an object", "[1, 2]", data, std::nullopt, {"not a JSON object"}},
      {"unknown dtype",
       header_with({{"dtype", "F8_E5M2"}, {"shape", {16}}, {"data_offsets", {0, 16}}}),
       data,
       std::nullopt,
       {"'a'", "F8_E5M2", "not supported"}},
      {"shape mismatch",
       header_with({{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}}),
       data,
       std::nullopt,
       {"'a'", "needs 12 bytes", "span 16"}},
      {"negative dim",
       header_with({{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}),
       data,
       std::nullopt,
       {"'a'", "non-negative"}},
      {"huge shape",
       header_with({{"dtype", "F32"},
                    {"shape", {int64_t{1} << 40, int64_t{1} << 40}},
                    {"data_offsets", {0, 16}}}),
       data,
       std::nullopt,
       {"'a'", "larger than"}},
      {"reversed offsets",
       header_with({{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}),
       data,
       std::nullopt,
       {"'a'", "[8, 4]"}},
      {"missing offsets",
       header_with({{"dtype", "F32"}, {"shape", {4}}}),
       data,
       std::nullopt,
       {"'a'", "data_offsets"}},
      // Checked before parsing: code that walks or prints a value recursively would run out of
      // stack on it.
      {"a shape nested 100 000 deep",
       R"({"a": {"dtype": "F32", "shape": )" + std::string(100000, '[') + std::string(100000, ']') +
           R"(, "data_offsets": [0, 16]}})",
       data,
       std::nullopt,
       {"header", "nested deeper than 256"}},
      {"overlap",
       nlohmann::json{{"a", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}},
                      {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}}
           .dump(),
       data,
       std::nullopt,
       {"'a'", "'b'", "overlap"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = dir + "/model.safetensors";
    write_file(path, c.header, c.data, c.length);
    expect_open_error(path, c.expected);
  }
  // A tensor of no elements may sit anywhere, even inside another's bytes.
  const std::string path = dir + "/empty.safetensors";
  write_file(path,
             nlohmann::json{{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                            {"e", {{"dtype", "F32"}, {"shape", {0, 3}}, {"data_offsets", {8, 8}}}}}
                 .dump(),
             data, std::nullopt);
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.entries().size(), 2u);
  // Shorter than the length field.
  std::ofstream(dir + "/tiny.safetensors") << "abc";
  expect_open_error(dir + "/tiny.safetensors", {"3 bytes"});
}

TEST(CheckpointTest, ShardedIndex) {
  const ScratchDir scratch("st_sharded");
  const std::string& dir = scratch.path();
  write_file(
      dir + "/part-1.safetensors",
      nlohmann::json{{"x", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}}.dump(),
      float_bytes({1, 2}));
  write_file(
      dir + "/part-2.safetensors",
      nlohmann::json{{"y", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}.dump(),
      float_bytes({3}));
  auto write_index = [&](const nlohmann::json& map) {
    std::ofstream(dir + "/model.safetensors.index.json")
        << nlohmann::json{{"weight_map", map}}.dump();
  };
  write_index({{"x", "part-1.safetensors"}, {"y", "part-2.safetensors"}});
  const Checkpoint checkpoint = Checkpoint::open(dir);
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(checkpoint.total_bytes(), 12);
  EXPECT_NE(checkpoint.file_of("y").find("part-2"), std::string::npos);
  EXPECT_THROW(checkpoint.tensor("z"), Error);

  write_index({{"x", "part-1.safetensors"}, {"y", "part-1.safetensors"}});
  EXPECT_THROW(Checkpoint::open(dir), Error);  // y is not in part-1
  write_index({{"x", "part-1.safetensors"}, {"y", "part-3.safetensors"}});
  EXPECT_THROW(Checkpoint::open(dir), Error);  // missing shard
  write_index({{"x", "../part-1.safetensors"}});
  EXPECT_THROW(Checkpoint::open(dir), Error);  // not a file in the directory
  EXPECT_THROW(Checkpoint::open(ScratchDir("st_empty").path()), Error);
}

}  // namespace
}  // namespace pagoda
