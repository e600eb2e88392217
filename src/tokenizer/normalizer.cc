#include "tokenizer/normalizer.h"

#include <memory>
#include <vector>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace pagoda {

std::function<std::string(std::string_view)> make_replacer(const nlohmann::json& pattern,
                                                           std::string content) {
  if (pattern.contains("String")) {
    std::string needle = pattern.at("String").get<std::string>();
    if (needle.empty()) return [](std::string_view text) { return std::string(text); };
    return [needle = std::move(needle), content = std::move(content)](std::string_view text) {
      std::string out;
      size_t copied = 0;
      for (size_t at = text.find(needle); at != std::string_view::npos;
           at = text.find(needle, copied)) {
        out.append(text.substr(copied, at - copied));
        out.append(content);
        copied = at + needle.size();
      }
      out.append(text.substr(copied));
      return out;
    };
  }
  if (pattern.contains("Regex")) {
    auto regex =
        std::make_shared<Regex>(pattern.at("Regex").get<std::string>(), RegexSyntax::kOniguruma);
    return [regex, content = std::move(content)](std::string_view text) {
      return regex->replace_all(text, content);
    };
  }
  fail("tokenizer.json: a pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, not {}",
       pattern.dump());
}

Normalizer make_normalizer(const nlohmann::json& config) {
  if (config.is_null()) return {};
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<Normalizer> steps;
    for (const nlohmann::json& step : config.value("normalizers", nlohmann::json::array())) {
      if (Normalizer normalizer = make_normalizer(step)) steps.push_back(std::move(normalizer));
    }
    return [steps = std::move(steps)](std::string_view text) {
      std::string out(text);
      for (const Normalizer& step : steps)
        out = step(out);
      return out;
    };
  }
  const std::pair<const char*, NormalizationForm> forms[] = {{"NFC", NormalizationForm::kNfc},
                                                             {"NFD", NormalizationForm::kNfd},
                                                             {"NFKC", NormalizationForm::kNfkc},
                                                             {"NFKD", NormalizationForm::kNfkd}};
  for (const auto& [name, form] : forms) {
    if (type == name) {
      return [form = form](std::string_view text) { return unicode_normalize(text, form); };
    }
  }
  if (type == "Lowercase") return [](std::string_view text) { return to_lower(text); };
  if (type == "StripAccents") return [](std::string_view text) { return strip_marks(text); };
  if (type == "Strip") {
    const bool left = config.value("strip_left", false);
    const bool right = config.value("strip_right", false);
    return [left, right](std::string_view text) {
      if (left) text = trim_start(text);
      if (right) text = trim_end(text);
      return std::string(text);
    };
  }
  if (type == "Prepend") {
    return [prefix = config.at("prepend").get<std::string>()](std::string_view text) {
      return prefix + std::string(text);
    };
  }
  if (type == "Replace") {
    return make_replacer(config.at("pattern"), config.value("content", std::string()));
  }
  fail("tokenizer.json: normalizer type '{}' is not supported", type);
}

}  // namespace pagoda
