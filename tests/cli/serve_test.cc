// `pagoda serve` flags that are checked before a model loads.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cli/cli_test_util.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

TEST(ServeCliTest, RefusesAPortOutOfRange) {
  for (const char* port : {"70000", "-1"}) {
    const CliRun run = run_pagoda(std::string("serve --port ") + port);
    EXPECT_NE(run.exit_code, 0) << port;
    EXPECT_NE(run.err.find("--port"), std::string::npos) << run.err;
  }
}

// NaN passes CLI11's range check; a grace of NaN seconds aborted every request at once.
TEST(ServeCliTest, RefusesAGraceThatIsNotANumber) {
  const CliRun run = run_pagoda("serve --shutdown-grace nan --model /nonexistent/model");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("--shutdown-grace nan: it must be in [0, 3600]"), std::string::npos)
      << run.err;
}

// Listening beyond loopback without a key is allowed but said; a key from the environment counts.
TEST(ServeCliTest, WarnsWhenExposedWithoutAKey) {
  const std::string args = "serve --host 0.0.0.0 --model /nonexistent/model";
  const CliRun open = run_pagoda(args);
  EXPECT_EQ(open.exit_code, 1);  // then fails on the missing model, before binding anything
  EXPECT_NE(open.err.find("warning: listening on 0.0.0.0 without an API key"), std::string::npos)
      << open.err;
  EXPECT_EQ(run_pagoda("serve --model /nonexistent/model").err.find("warning"), std::string::npos);
  ::setenv("PAGODA_API_KEY", "secret", 1);
  const CliRun keyed = run_pagoda(args);
  ::unsetenv("PAGODA_API_KEY");
  EXPECT_EQ(keyed.err.find("warning"), std::string::npos) << keyed.err;
  EXPECT_NE(keyed.err.find("/nonexistent/model"), std::string::npos) << keyed.err;
}

}  // namespace
}  // namespace pagoda
