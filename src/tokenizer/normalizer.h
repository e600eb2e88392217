// tokenizer.json normalizers: text → text before pre-tokenization.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pagoda {

using Normalizer = std::function<std::string(std::string_view)>;

// The normalizer a tokenizer.json `normalizer` object describes; an empty function for null. Error
// naming the type for one that is not supported.
Normalizer make_normalizer(const nlohmann::json& config);

// A tokenizer.json pattern object ({"String": ...} or {"Regex": ...}) replaced by `content`
// everywhere in a text. Shared by the Replace normalizer, pre-tokenizer and decoder.
std::function<std::string(std::string_view)> make_replacer(const nlohmann::json& pattern,
                                                           std::string content);

}  // namespace pagoda
