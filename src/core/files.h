// Reading whole files, with errors that name the file, and the one bound on JSON nesting.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

namespace pagoda {

// Whether `path` names something that exists (a regular file, for is_regular_file_path). Never
// throws: a path the system refuses (too long, say) is one that does not exist.
bool path_exists(const std::string& path);
bool is_regular_file_path(const std::string& path);

// The most bytes read_text_file reads: far more than any config, tokenizer or template holds.
inline constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;
// The file's bytes; Error when it cannot be read, is not a regular file (a device, a FIFO) or is
// longer than kMaxTextFileBytes.
std::string read_text_file(const std::string& path);
// The file parsed as JSON (nesting checked first); Error naming the file and where parsing
// failed.
nlohmann::json read_json_file(const std::string& path);

[[noreturn]] void json_parse_error(std::string_view what, const nlohmann::json::exception& error);

// How deep arrays and objects may nest in any JSON pagoda reads (model files, requests, prompts):
// far deeper than real documents go, and shallow enough that code walking a value recursively (or
// printing one) cannot exhaust a thread's stack.
inline constexpr int kMaxJsonDepth = 256;
// Error, saying that `what` nests deeper than kMaxJsonDepth, when `text` does; brackets inside
// strings do not count. Meant to run before parsing: one pass over the bytes, no allocation.
void check_json_depth(std::string_view text, std::string_view what);
// How many members an object parsed as nlohmann::ordered_json (requests, prompt files) may hold:
// its insertion looks for an equal key member by member, so n members cost n² / 2 comparisons
// (50 000 members, half a megabyte of request body, took 4 seconds).
inline constexpr int64_t kMaxOrderedJsonMembers = 4096;
// Error, saying that `what` has an object of more than `max_members` members, when `text` does;
// what is inside strings does not count. One pass over the bytes, after check_json_depth.
void check_json_members(std::string_view text, std::string_view what, int64_t max_members);
// What went wrong in parsing JSON (a syntax error, or a number that does not fit), in a message
// cut short: the parser quotes the input it stopped at.
std::string describe_json_error(const nlohmann::json::exception& error);

// `text` parsed as JSON after the nesting check; Error "`what`: malformed JSON: ..." when it is
// not JSON. Json is nlohmann::json or nlohmann::ordered_json.
template <typename Json = nlohmann::json>
Json parse_json_text(std::string_view text, std::string_view what) {
  check_json_depth(text, what);
  if constexpr (std::is_same_v<Json, nlohmann::ordered_json>) {
    check_json_members(text, what, kMaxOrderedJsonMembers);
  }
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    json_parse_error(what, error);
  }
}

// `value` as JSON text, with invalid UTF-8 in its strings (text a user gave may hold it) written
// as U+FFFD rather than thrown on. Json is nlohmann::json or nlohmann::ordered_json.
template <typename Json>
std::string json_dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}
// `text` cut to its first 40 bytes (then "..."), for quoting in a message of bounded length.
inline std::string excerpt(std::string_view text) {
  constexpr size_t kMaxQuoted = 40;
  if (text.size() <= kMaxQuoted) return std::string(text);
  return std::string(text.substr(0, kMaxQuoted)) + "...";
}
// json_dump of `value`, cut as excerpt() cuts.
template <typename Json>
std::string json_excerpt(const Json& value) {
  return excerpt(json_dump(value));
}

[[noreturn]] void json_integer_error(const std::string& shown, int64_t min, int64_t max,
                                     std::string_view what);
// `value` as an integer in [min, max]; Error naming `what` when it is not an integer (a float
// such as 2e22 included, whose conversion would be undefined) or lies outside the range.
template <typename Json>
int64_t json_integer(const Json& value, int64_t min, int64_t max, std::string_view what) {
  const bool fits = value.is_number_integer() &&
                    !(value.is_number_unsigned() &&
                      value.template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
  if (!fits || value.template get<int64_t>() < min || value.template get<int64_t>() > max) {
    json_integer_error(value.is_primitive() ? value.dump().substr(0, 40) : value.type_name(), min,
                       max, what);
  }
  return value.template get<int64_t>();
}

}  // namespace pagoda
