#include "core/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "scratch_dir.h"

namespace pagoda {
namespace {

std::string nested(int depth, const std::string& inside = "1") {
  return std::string(depth, '[') + inside + std::string(depth, ']');
}

TEST(JsonDepthTest, AllowsTheLimitAndRefusesOneMore) {
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth), "x"));
  EXPECT_NO_THROW(check_json_depth(R"({"a": {"b": [1, {"c": []}]}})", "x"));
  try {
    check_json_depth("{\"a\": " + nested(kMaxJsonDepth) + "}", "request.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("request.json"), std::string::npos) << message;
    EXPECT_NE(message.find("deeper than 256"), std::string::npos) << message;
    EXPECT_LT(message.size(), 200u) << message;  // no quoting of the document
  }
}

// Brackets inside strings are text, escaped quotes do not end a string, and the limit counts
// arrays and objects alike.
TEST(JsonDepthTest, CountsOnlyStructure) {
  EXPECT_NO_THROW(check_json_depth("[\"" + std::string(1000, '[') + "\"]", "x"));
  EXPECT_NO_THROW(check_json_depth(R"(["\"[[[[", "\\"])" + nested(kMaxJsonDepth - 1), "x"));
  EXPECT_THROW(check_json_depth(R"(["\\"])" + nested(kMaxJsonDepth + 1), "x"), Error);
  std::string mixed;
  for (int i = 0; i <= kMaxJsonDepth; ++i)
    mixed += i % 2 == 0 ? "{\"k\": " : "[";
  EXPECT_THROW(check_json_depth(mixed, "x"), Error);
}

std::string object_of(int members) {
  std::string text = "{";
  for (int i = 0; i < members; ++i)
    text += (i > 0 ? ", \"k" : "\"k") + std::to_string(i) + "\": [1, 2, \"a,b\"]";
  return text + "}";
}

// An ordered_json object takes at most kMaxOrderedJsonMembers members (its parse is quadratic in
// them); commas in arrays, in strings and in nested objects count for those alone, and the plain
// parse takes any number.
TEST(JsonMembersTest, OrderedObjectsHaveABoundedSize) {
  using Ordered = nlohmann::ordered_json;
  EXPECT_EQ(parse_json_text<Ordered>(object_of(kMaxOrderedJsonMembers), "x").size(),
            static_cast<size_t>(kMaxOrderedJsonMembers));
  try {
    parse_json_text<Ordered>("[1, {\"a\": " + object_of(kMaxOrderedJsonMembers + 1) + "}]",
                             "the body");
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("the body"), std::string::npos) << message;
    EXPECT_NE(message.find("more than 4096 members"), std::string::npos) << message;
  }
  // Two objects of the limit side by side, one inside the other.
  const std::string inner = object_of(kMaxOrderedJsonMembers - 1);
  EXPECT_NO_THROW(parse_json_text<Ordered>(
      "{\"x\": " + inner + ", " + object_of(kMaxOrderedJsonMembers - 1).substr(1), "x"));
  EXPECT_EQ(parse_json_text<nlohmann::json>(object_of(kMaxOrderedJsonMembers + 1), "x").size(),
            static_cast<size_t>(kMaxOrderedJsonMembers + 1));
}

// Text files are read only when they are regular files: a device (a link to /dev/zero) would be
// read for ever and a FIFO would block the open. None of these may hang or throw anything but
// Error; path checks never throw at all.
TEST(FilesTest, OnlyRegularFilesAreRead) {
  const testing::ScratchDir scratch("files");
  const std::string& dir = scratch.path();
  const std::string fifo = dir + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string zero = dir + "/tokenizer.json";
  ASSERT_EQ(::symlink("/dev/zero", zero.c_str()), 0);
  for (const std::string& path : {fifo, zero, dir}) {
    try {
      read_text_file(path);
      ADD_FAILURE() << path << " was read";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("not a regular file"), std::string::npos)
          << error.what();
    }
  }
  EXPECT_TRUE(path_exists(fifo));
  EXPECT_FALSE(is_regular_file_path(fifo));
  const std::string text = dir + "/ok.json";
  std::ofstream(text) << "{\"a\": 1}";
  EXPECT_EQ(read_text_file(text), "{\"a\": 1}");
  EXPECT_TRUE(is_regular_file_path(text));
  // A name longer than the system allows is one that does not exist.
  EXPECT_FALSE(path_exists(std::string(300, 'x')));
  EXPECT_FALSE(is_regular_file_path(dir + "/" + std::string(300, 'x')));
}

}  // namespace
}  // namespace pagoda
