#include "core/files.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pagoda {

std::string read_text_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot read '{}': no such file or not readable", path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    fail("{}: malformed JSON at byte {}: {}", path, error.byte, error.what());
  }
}

}  // namespace pagoda
