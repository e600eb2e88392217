// Files of the source tree that tests read: the committed fixtures (tests/fixtures/, written by
// tools/make_fixtures.py) and the example model configs (examples/configs/).
#pragma once

#include <string>

namespace pagoda::testing {

inline std::string fixture(const std::string& name) {
  return std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

inline std::string example_config(const std::string& name) {
  return std::string(PAGODA_SOURCE_DIR) + "/examples/configs/" + name;
}

}  // namespace pagoda::testing
