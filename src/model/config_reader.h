// Typed, validated access to the fields of a Hugging Face config.json object. Every failure is an
// Error naming the file, the field (with its path) and the value found.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& object, std::string source, std::string path = "");

  bool has(const std::string& key) const;  // present and not null
  const nlohmann::json& raw() const { return object_; }
  const std::string& source() const { return source_; }

  int64_t integer(const std::string& key) const;  // required
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  std::optional<int64_t> optional_integer(const std::string& key) const;
  // A required integer in [1, limit].
  int64_t positive(const std::string& key, int64_t limit = kMaxConfigInteger) const;
  int64_t positive_or(const std::string& key, int64_t fallback,
                      int64_t limit = kMaxConfigInteger) const;

  // No size in a config is larger; bounding them keeps all byte arithmetic inside int64.
  static constexpr int64_t kMaxConfigInteger = int64_t{1} << 40;
  // A number (integer or not); `fallback` when absent or null.
  double number_or(const std::string& key, double fallback) const;
  // A number in [low, high] (NaN is not); `fallback` when absent or null.
  double number_in(const std::string& key, double fallback, double low, double high) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::string string(const std::string& key) const;  // required
  std::optional<std::string> optional_string(const std::string& key) const;
  std::optional<std::vector<std::string>> optional_string_list(const std::string& key) const;
  std::optional<std::vector<int64_t>> optional_integer_list(const std::string& key) const;
  // A nested object; required.
  ConfigReader child(const std::string& key) const;

  // Throws Error: "<source>: field '<path><key>' <problem>".
  [[noreturn]] void fail_field(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json& field(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* expected) const;

  const nlohmann::json& object_;
  std::string source_;
  std::string path_;  // "text_config." for nested objects
};

}  // namespace pagoda
