// Reading whole files, with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pagoda {

// The file's bytes; Error when it cannot be read.
std::string read_text_file(const std::string& path);
// The file parsed as JSON; Error naming the file and the byte where parsing failed.
nlohmann::json read_json_file(const std::string& path);

}  // namespace pagoda
