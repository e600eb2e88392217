#include "core/files.h"

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"

namespace pagoda {

bool path_exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error) && !error;
}

bool is_regular_file_path(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error) && !error;
}

std::string read_text_file(const std::string& path) {
  // A regular file of bounded size: a device (a link to /dev/zero) would be read for ever, and a
  // FIFO would block the open.
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    fail("cannot read '{}': no such file or not readable", path);
  }
  if (!std::filesystem::is_regular_file(status)) fail("cannot read '{}': not a regular file", path);
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) fail("cannot read '{}': {}", path, error.message());
  if (size > static_cast<std::uintmax_t>(kMaxTextFileBytes)) {
    fail("cannot read '{}': {} bytes; text files are read up to {}", path, size, kMaxTextFileBytes);
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot read '{}': no such file or not readable", path);
  std::string contents(static_cast<size_t>(size), '\0');
  file.read(contents.data(), static_cast<std::streamsize>(size));
  contents.resize(static_cast<size_t>(file.gcount()));
  return contents;
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path), path);
}

void json_parse_error(std::string_view what, const nlohmann::json::exception& error) {
  fail("{}: malformed JSON: {}", what, describe_json_error(error));
}

std::string describe_json_error(const nlohmann::json::exception& error) {
  constexpr size_t kMaxLength = 160;
  std::string text = error.what();
  if (text.size() > kMaxLength) text = text.substr(0, kMaxLength) + "...";
  return text;
}

void json_integer_error(const std::string& shown, int64_t min, int64_t max, std::string_view what) {
  fail("{}: {} is not an integer in {}..{}", what, shown, min, max);
}

namespace {

// Calls visit(c, i) for each byte c (at i) of JSON text outside its strings (quotes excluded).
template <typename Visit>
void for_each_outside_strings(std::string_view text, Visit&& visit) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else {
      visit(c, i);
    }
  }
}

}  // namespace

void check_json_depth(std::string_view text, std::string_view what) {
  int depth = 0;
  for_each_outside_strings(text, [&](char c, size_t i) {
    if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        fail("{}: JSON nested deeper than {} levels (at byte {})", what, kMaxJsonDepth, i);
      }
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced brackets are the parser's to report
    }
  });
}

void check_json_members(std::string_view text, std::string_view what, int64_t max_members) {
  // Per open bracket: whether it is an object, and the commas seen directly inside it.
  std::vector<std::pair<bool, int64_t>> open;
  for_each_outside_strings(text, [&](char c, size_t i) {
    if (c == '[' || c == '{') {
      open.emplace_back(c == '{', 0);
    } else if (c == ']' || c == '}') {
      if (!open.empty()) open.pop_back();  // unbalanced brackets are the parser's to report
    } else if (c == ',' && !open.empty() && open.back().first &&
               ++open.back().second >= max_members) {
      fail("{}: a JSON object has more than {} members (at byte {})", what, max_members, i);
    }
  });
}

}  // namespace pagoda
