#include "core/error.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

// Internal errors name the file within the project, never the directory the build ran in: their
// messages can reach a server's clients.
TEST(ErrorTest, ACheckNamesTheFileWithinTheProject) {
  try {
    PAGODA_CHECK(1 + 1 == 3, "arithmetic is {}", "broken");
    FAIL() << "no throw";
  } catch (const InternalError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("internal error at tests/core/error_test.cc:", 0), 0u) << message;
    EXPECT_NE(message.find("check '1 + 1 == 3' failed: arithmetic is broken"), std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace pagoda
