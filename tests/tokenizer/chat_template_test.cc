// pagoda's Jinja interpreter against @huggingface/jinja: the real chat templates of the peer
// tokenizers on tests/tokenizer/conversations.json, and synthetic templates that exercise single
// features, render byte for byte as the peer renders them, and raise wherever the peer raises.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "tests/tokenizer/peer_data.h"
#include "tokenizer/jinja/jinja.h"

namespace pagoda {
namespace {

using testing::peer_output;

// What pagoda makes of one case: the rendered text, or the error it raised.
struct Outcome {
  std::optional<std::string> text;
  std::string error;
};

Outcome render_case(const std::optional<JinjaTemplate>& parsed, const std::string& parse_error,
                    const nlohmann::ordered_json& context) {
  if (!parsed) return {std::nullopt, parse_error};
  try {
    return {parsed->render(context), ""};
  } catch (const Error& e) {
    return {std::nullopt, e.what()};
  } catch (const std::exception& e) {
    return {std::nullopt, std::string("unexpected exception (not pagoda::Error): ") + e.what()};
  }
}

TEST(ChatTemplateParityTest, RendersLikeThePeerOnEveryCase) {
  const std::string path = peer_output("templates.json");
  std::ifstream file(path);
  ASSERT_TRUE(file) << path;
  const auto data = nlohmann::ordered_json::parse(file);

  std::map<std::string, std::optional<JinjaTemplate>> templates;
  std::map<std::string, std::string> parse_errors;
  for (const auto& [key, source] : data.at("templates").items()) {
    try {
      templates.emplace(key, JinjaTemplate::parse(source.get<std::string>()));
    } catch (const Error& e) {
      templates.emplace(key, std::nullopt);
      parse_errors[key] = e.what();
    }
  }

  int cases = 0, raising = 0, failures = 0;
  for (const auto& c : data.at("cases")) {
    ++cases;
    const std::string key = c.at("template").get<std::string>();
    const Outcome got = render_case(templates.at(key), parse_errors[key], c.at("context"));
    std::string problem;
    if (c.contains("error")) {
      ++raising;
      if (got.text) {
        problem = "the peer raised (" + c["error"].get<std::string>() + ") but pagoda rendered " +
                  nlohmann::json(*got.text).dump();
      }
    } else if (!got.text) {
      problem = "pagoda raised: " + got.error;
    } else if (*got.text != c.at("expected").get<std::string>()) {
      problem =
          "rendered " + nlohmann::json(*got.text).dump() + "\n  expected " + c["expected"].dump();
    }
    if (!problem.empty()) {
      ++failures;
      ADD_FAILURE() << c.at("name").get<std::string>() << ": " << problem;
    }
  }
  EXPECT_GE(cases, 150) << "templates.json looks truncated";
  EXPECT_GT(raising, 0);
  EXPECT_EQ(failures, 0) << "of " << cases << " cases (" << raising << " that raise)";
}

}  // namespace
}  // namespace pagoda
