// The tokenizer's components on small hand-written tokenizer.json files.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "core/error.h"
#include "scratch_dir.h"
#include "tokenizer/regex.h"

namespace pagoda {
namespace {

// A byte-level BPE over "a", "b", "c", "ab", "abc" and " " (as "Ġ").
nlohmann::json byte_level_tokenizer() {
  return nlohmann::json::parse(R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5,
                                       "Ġa": 6, "<s>": 7},
              "merges": ["a b", "ab c", "Ġ a"]},
    "added_tokens": [{"id": 7, "content": "<s>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "ByteLevel"}
  })");
}

TEST(TokenizerTest, MergesInRankOrderAndAddsSpecialTokens) {
  const Tokenizer tokenizer(byte_level_tokenizer(), nlohmann::json::object());
  EXPECT_EQ(tokenizer.encode("abc"), (std::vector<int32_t>{7, 4}));
  EXPECT_EQ(tokenizer.encode("abc", {.add_special_tokens = false}), (std::vector<int32_t>{4}));
  // " a" is one word of the byte-level split; "<s>" inside text is the added token.
  EXPECT_EQ(tokenizer.encode("ab a<s>c", {.add_special_tokens = false}),
            (std::vector<int32_t>{3, 6, 7, 2}));
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{7, 3, 6, 2}), "<s>ab ac");
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{7, 3, 6}, {.skip_special_tokens = true}), "ab a");
  EXPECT_EQ(tokenizer.token_to_id("Ġa"), 6);
  EXPECT_EQ(tokenizer.id_to_token(4), "abc");
  EXPECT_TRUE(tokenizer.is_special(7));
  EXPECT_FALSE(tokenizer.is_special(0));
  // An id past the tokenizer's vocabulary (a model's padded rows) has no text; a negative one is
  // an error.
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{3, 99, 6}), "ab a");
  EXPECT_THROW(tokenizer.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(tokenizer.id_to_token(99), Error);
}

TEST(TokenizerTest, ByteFallbackAndUnknownTokens) {
  nlohmann::json json = nlohmann::json::parse(R"({
    "model": {"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3, "▁": 4},
              "merges": [], "byte_fallback": true, "unk_token": "<unk>"},
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}]}
  })");
  const Tokenizer with_bytes(json, nlohmann::json::object());
  EXPECT_EQ(with_bytes.encode("a é"), (std::vector<int32_t>{1, 4, 2, 3}));
  EXPECT_EQ(with_bytes.decode(std::vector<int32_t>{1, 4, 2, 3}), "a é");
  EXPECT_EQ(with_bytes.decode(std::vector<int32_t>{2, 1}),
            "\xEF\xBF\xBD"
            "a");                                                // a lone byte
  EXPECT_EQ(with_bytes.encode("ü"), (std::vector<int32_t>{0}));  // bytes missing: unknown
}

TEST(TokenizerTest, SplitBehaviors) {
  auto pieces = [](const char* behavior, bool invert, const std::string& text) {
    const nlohmann::json config = {{"type", "Split"},
                                   {"pattern", {{"String", "-"}}},
                                   {"behavior", behavior},
                                   {"invert", invert}};
    std::vector<std::string> out;
    make_pre_tokenizer(config)(text, 0, out);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Isolated", false, "a-b--c"), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(pieces("Removed", false, "a-b--c"), (V{"a", "b", "c"}));
  EXPECT_EQ(pieces("MergedWithPrevious", false, "a-b--c"), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(pieces("MergedWithNext", false, "a-b--c"), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(pieces("Contiguous", false, "a-b--c"), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(pieces("Removed", true, "a-b--c"), (V{"-", "-", "-"}));
}

TEST(TokenizerTest, OnigurumaClassesKeepTheirMeaning) {
  // \s includes U+0085 and not U+FEFF in Oniguruma; \d is any decimal digit; \w includes marks.
  const Regex space(R"(\s+)", RegexSyntax::kOniguruma);
  EXPECT_EQ(space
                .find_all("a\xC2\x85"
                          "b")
                .size(),
            1u);
  EXPECT_EQ(space
                .find_all("a\xEF\xBB\xBF"
                          "b")
                .size(),
            0u);
  const Regex js_space(R"(\s+)", RegexSyntax::kJavaScript);
  EXPECT_EQ(js_space
                .find_all("a\xC2\x85"
                          "b")
                .size(),
            0u);
  EXPECT_EQ(js_space
                .find_all("a\xEF\xBB\xBF"
                          "b")
                .size(),
            1u);
  EXPECT_EQ(Regex(R"(\d+)", RegexSyntax::kOniguruma).find_all("x\xD9\xA3\xD9\xA4").size(), 1u);
  EXPECT_EQ(Regex(R"(\d+)", RegexSyntax::kJavaScript).find_all("x\xD9\xA3\xD9\xA4").size(), 0u);
  EXPECT_EQ(Regex(R"([\s\d]+)", RegexSyntax::kOniguruma).find_all(" 1 ").size(), 1u);
  EXPECT_EQ(Regex(R"(a.b)", RegexSyntax::kOniguruma).find_all("a\nb").size(), 0u);
  EXPECT_THROW(Regex("(unclosed", RegexSyntax::kOniguruma), Error);
  EXPECT_EQ(Regex("a", RegexSyntax::kOniguruma).replace_all("banana", "o"), "bonono");
  EXPECT_EQ(Regex(".*", RegexSyntax::kLiteral).replace_all("a.*b", "-"), "a-b");
}

TEST(TokenizerTest, UnsupportedComponentsAreNamed) {
  auto error_of = [](const char* key, const nlohmann::json& value) {
    nlohmann::json json = byte_level_tokenizer();
    json[key] = value;
    try {
      Tokenizer tokenizer(json, nlohmann::json::object());
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("normalizer", {{"type", "Precompiled"}}).find("'Precompiled'"),
            std::string::npos);
  EXPECT_NE(error_of("pre_tokenizer", {{"type", "UnicodeScripts"}}).find("'UnicodeScripts'"),
            std::string::npos);
  EXPECT_NE(error_of("decoder", {{"type", "CTC"}}).find("'CTC'"), std::string::npos);
  EXPECT_NE(error_of("post_processor", {{"type", "Foo"}}).find("'Foo'"), std::string::npos);
  EXPECT_NE(error_of("model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}})
                .find("'Unigram'"),
            std::string::npos);
  nlohmann::json bad_merge = byte_level_tokenizer();
  bad_merge["model"]["merges"].push_back("x y");
  EXPECT_THROW(Tokenizer(bad_merge, nlohmann::json::object()), Error);
  EXPECT_THROW(Tokenizer::load("/nonexistent"), Error);
}

// Found by the tokenizer.json fuzzer: a component without its "type" escaped as a JSON library
// exception and aborted the process; a huge id sized a table to match; a float id was converted
// to an int.
TEST(TokenizerTest, MalformedFilesAreErrorsNotAborts) {
  auto error_of = [](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json json = byte_level_tokenizer();
    change(json);
    try {
      Tokenizer tokenizer(json, nlohmann::json::object());
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([](nlohmann::json& json) {
              json["pre_tokenizer"] = {{"add_prefix_space", true}};
            }).find("tokenizer.json"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& json) {
              json["added_tokens"][0]["id"] = "seven";
            }).find("tokenizer.json"),
            std::string::npos);
  const auto far_id = [](nlohmann::json& json) { json["model"]["vocab"]["far"] = 2000000000; };
  EXPECT_NE(
      error_of(far_id).find("the id of token 'far': 2000000000 is not an integer in 0..4194303"),
      std::string::npos);
  const auto far_added = [](nlohmann::json& json) { json["added_tokens"][0]["id"] = 2000000000; };
  EXPECT_NE(error_of(far_added).find("2000000000 is not an integer in 0.."), std::string::npos);
  // A float id: converting 2e22 to an int is undefined behaviour (UBSan found it).
  const auto float_id = [](nlohmann::json& json) { json["model"]["vocab"]["far"] = 2e22; };
  EXPECT_NE(error_of(float_id).find("is not an integer in 0.."), std::string::npos);
}

// chat_template.json holds the template as tokenizer_config.json does (a string, or named
// templates of which "default" is taken); one of the wrong shape is an Error naming the file, not
// a JSON library exception.
TEST(TokenizerTest, ChatTemplateJsonIsReadOrRefusedByName) {
  const testing::ScratchDir dir("chat_template_json");
  std::ofstream(dir.file("tokenizer.json")) << byte_level_tokenizer().dump();
  const auto load_with = [&](const std::string& contents) {
    std::ofstream(dir.file("chat_template.json")) << contents;
    try {
      return Tokenizer::load(dir.path()).chat_template();
    } catch (const Error& error) {
      return std::string("error: ") + error.what();
    }
  };
  EXPECT_EQ(load_with(R"({"chat_template": "{{ x }}"})"), "{{ x }}");
  EXPECT_EQ(load_with(R"({"chat_template": [{"name": "tool_use", "template": "t"},
                                            {"name": "default", "template": "d"}]})"),
            "d");
  for (const std::string bad : {R"({"chat_template": [{"name": "default", "template": 5}]})",
                                R"({"chat_template": [5]})", R"([5])"}) {
    SCOPED_TRACE(bad);
    const std::string result = load_with(bad);
    EXPECT_EQ(result.rfind("error: " + dir.file("chat_template.json") + ": ", 0), 0u) << result;
  }
}

}  // namespace
}  // namespace pagoda
