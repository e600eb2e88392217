#include "model/config_reader.h"

#include <cmath>

#include "core/error.h"

namespace pagoda {
namespace {

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

}  // namespace

ConfigReader::ConfigReader(const nlohmann::json& object, std::string source, std::string path)
    : object_(object), source_(std::move(source)), path_(std::move(path)) {
  if (!object_.is_object()) {
    fail("{}: {} must be a JSON object; got {}", source_, path_.empty() ? "the config" : path_,
         describe(object_));
  }
}

void ConfigReader::fail_field(const std::string& key, const std::string& problem) const {
  fail("{}: field '{}{}' {}", source_, path_, key, problem);
}

void ConfigReader::wrong_type(const std::string& key, const char* expected) const {
  fail_field(key, std::string("must be ") + expected + "; got " + describe(object_.at(key)));
}

bool ConfigReader::has(const std::string& key) const {
  const auto it = object_.find(key);
  return it != object_.end() && !it->is_null();
}

const nlohmann::json& ConfigReader::field(const std::string& key) const {
  if (!has(key)) fail_field(key, "is missing");
  return object_.at(key);
}

int64_t ConfigReader::integer(const std::string& key) const {
  const nlohmann::json& value = field(key);
  if (value.is_number_integer()) return value.get<int64_t>();
  // Some exporters write integral floats (e.g. 4096.0).
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (std::isfinite(number) && std::abs(number) < 0x1p62 && number == std::trunc(number)) {
      return static_cast<int64_t>(number);
    }
  }
  wrong_type(key, "an integer");
}

int64_t ConfigReader::integer_or(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

double ConfigReader::number_or(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& value = object_.at(key);
  if (!value.is_number()) wrong_type(key, "a number");
  return value.get<double>();
}

double ConfigReader::number_in(const std::string& key, double fallback, double low,
                               double high) const {
  const double value = number_or(key, fallback);
  if (!(value >= low && value <= high)) {
    fail_field(key, fmt::format("is {}; expected a number in [{}, {}]", value, low, high));
  }
  return value;
}

std::optional<int64_t> ConfigReader::optional_integer(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return integer(key);
}

int64_t ConfigReader::positive(const std::string& key, int64_t limit) const {
  const int64_t value = integer(key);
  if (value < 1) fail_field(key, "is " + std::to_string(value) + "; it must be at least 1");
  if (value > limit) {
    fail_field(key,
               "is " + std::to_string(value) + "; it must be at most " + std::to_string(limit));
  }
  return value;
}

int64_t ConfigReader::positive_or(const std::string& key, int64_t fallback, int64_t limit) const {
  return has(key) ? positive(key, limit) : fallback;
}

bool ConfigReader::boolean_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const nlohmann::json& value = object_.at(key);
  if (!value.is_boolean()) wrong_type(key, "true or false");
  return value.get<bool>();
}

std::string ConfigReader::string(const std::string& key) const {
  const nlohmann::json& value = field(key);
  if (!value.is_string()) wrong_type(key, "a string");
  return value.get<std::string>();
}

std::optional<std::string> ConfigReader::optional_string(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return string(key);
}

std::optional<std::vector<std::string>> ConfigReader::optional_string_list(
    const std::string& key) const {
  if (!has(key)) return std::nullopt;
  const nlohmann::json& value = object_.at(key);
  if (!value.is_array()) wrong_type(key, "a list of strings");
  std::vector<std::string> out;
  for (const nlohmann::json& item : value) {
    if (!item.is_string()) wrong_type(key, "a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int64_t>> ConfigReader::optional_integer_list(
    const std::string& key) const {
  if (!has(key)) return std::nullopt;
  const nlohmann::json& value = object_.at(key);
  if (!value.is_array()) wrong_type(key, "a list of integers");
  std::vector<int64_t> out;
  for (const nlohmann::json& item : value) {
    if (!item.is_number_integer()) wrong_type(key, "a list of integers");
    out.push_back(item.get<int64_t>());
  }
  return out;
}

ConfigReader ConfigReader::child(const std::string& key) const {
  const nlohmann::json& value = field(key);
  if (!value.is_object()) wrong_type(key, "a JSON object");
  return ConfigReader(value, source_, path_ + key + ".");
}

}  // namespace pagoda
