// Text pieces of a stream or a decode, put back together.
#pragma once

#include <string>
#include <vector>

namespace pagoda::testing {

inline std::string joined(const std::vector<std::string>& pieces) {
  std::string text;
  for (const std::string& piece : pieces)
    text += piece;
  return text;
}

}  // namespace pagoda::testing
