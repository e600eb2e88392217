#include "core/files.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

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

}  // namespace
}  // namespace pagoda
