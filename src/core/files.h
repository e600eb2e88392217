// Reading whole files, with errors that name the file, and the one bound on JSON nesting.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pagoda {

// The file's bytes; Error when it cannot be read.
std::string read_text_file(const std::string& path);
// The file parsed as JSON (nesting checked first); Error naming the file and where parsing
// failed.
nlohmann::json read_json_file(const std::string& path);

// How deep arrays and objects may nest in any JSON pagoda reads (model files, requests, prompts):
// far deeper than real documents go, and shallow enough that code walking a value recursively (or
// printing one) cannot exhaust a thread's stack.
inline constexpr int kMaxJsonDepth = 256;
// Error, saying that `what` nests deeper than kMaxJsonDepth, when `text` does; brackets inside
// strings do not count. Meant to run before parsing: one pass over the bytes, no allocation.
void check_json_depth(std::string_view text, std::string_view what);
// What went wrong in parsing JSON (a syntax error, or a number that does not fit), in a message
// cut short: the parser quotes the input it stopped at.
std::string describe_json_error(const nlohmann::json::exception& error);

}  // namespace pagoda
