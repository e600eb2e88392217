#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <memory>

#include "core/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// GPT-2's split, as the byte-level pre-tokenizer applies it (with JavaScript's \s, as Hugging
// Face's JavaScript tokenizers write it).
constexpr std::string_view kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// ASCII punctuation and Unicode's P category.
constexpr std::string_view kPunctuation =
    R"(\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E})";

// The pieces of `text` that `regex` matches, in order (empty matches dropped).
void append_matches(const Regex& regex, std::string_view text, std::vector<std::string>& out) {
  for (const auto& [begin, end] : regex.find_all(text)) {
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
  }
}

PreTokenizer matches_of(std::string pattern, RegexSyntax syntax) {
  auto regex = std::make_shared<Regex>(pattern, syntax);
  return [regex](std::string_view text, int64_t, std::vector<std::string>& out) {
    append_matches(*regex, text, out);
  };
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail("tokenizer.json: Split behavior '{}' is not supported", name);
}

// Splits `text` around the matches of `regex` as the behavior says (the Rust library's meaning).
void split(const Regex& regex, SplitBehavior behavior, bool invert, std::string_view text,
           std::vector<std::string>& out) {
  // Alternating pieces: each with whether it is a match (after inversion).
  std::vector<std::pair<std::string_view, bool>> pieces;
  size_t copied = 0;
  for (const auto& [begin, end] : regex.find_all(text)) {
    if (end == begin) continue;
    if (begin > copied) pieces.emplace_back(text.substr(copied, begin - copied), invert);
    pieces.emplace_back(text.substr(begin, end - begin), !invert);
    copied = end;
  }
  if (copied < text.size()) pieces.emplace_back(text.substr(copied), invert);
  std::string carried;  // MergedWithNext: a match waiting for the piece after it
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& [piece, is_match] = pieces[i];
    const bool follows_match = i > 0 && pieces[i - 1].second;
    switch (behavior) {
      case SplitBehavior::kRemoved:
        if (!is_match) out.emplace_back(piece);
        break;
      case SplitBehavior::kIsolated:
        out.emplace_back(piece);
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (is_match && i > 0 && !follows_match) {
          out.back() += piece;
        } else {
          out.emplace_back(piece);
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (is_match && i + 1 < pieces.size() && !pieces[i + 1].second) {
          carried = piece;
        } else {
          out.push_back(carried + std::string(piece));
          carried.clear();
        }
        break;
      case SplitBehavior::kContiguous:
        if (is_match && follows_match) {
          out.back() += piece;
        } else {
          out.emplace_back(piece);
        }
        break;
    }
  }
}

PreTokenizer make_split(const nlohmann::json& config) {
  const nlohmann::json& pattern = config.at("pattern");
  std::shared_ptr<Regex> regex;
  if (pattern.contains("String")) {
    regex = std::make_shared<Regex>(pattern.at("String").get<std::string>(), RegexSyntax::kLiteral);
  } else if (pattern.contains("Regex")) {
    regex =
        std::make_shared<Regex>(pattern.at("Regex").get<std::string>(), RegexSyntax::kOniguruma);
  } else {
    fail("tokenizer.json: Split needs a String or Regex pattern, not {}", pattern.dump());
  }
  const SplitBehavior behavior = parse_behavior(config.value("behavior", std::string("Isolated")));
  const bool invert = config.value("invert", false);
  return [regex, behavior, invert](std::string_view text, int64_t, std::vector<std::string>& out) {
    split(*regex, behavior, invert, text, out);
  };
}

PreTokenizer make_byte_level(const nlohmann::json& config) {
  const bool add_prefix_space = config.value("add_prefix_space", false);
  const bool use_regex = config.value("use_regex", true);
  auto regex = std::make_shared<Regex>(kByteLevelPattern, RegexSyntax::kJavaScript);
  return [=](std::string_view text, int64_t, std::vector<std::string>& out) {
    std::string prefixed;
    if (add_prefix_space && !text.starts_with(' ')) {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    std::vector<std::string> words;
    if (use_regex) {
      append_matches(*regex, text, words);
    } else {
      words.emplace_back(text);
    }
    for (const std::string& word : words) {
      std::string mapped;
      mapped.reserve(word.size() * 2);
      for (const char c : word)
        mapped += byte_level_char(static_cast<uint8_t>(c));
      out.push_back(std::move(mapped));
    }
  };
}

PreTokenizer make_metaspace(const nlohmann::json& config) {
  const std::string replacement = config.value("replacement", std::string("\u2581"));
  const std::string scheme = config.value("prepend_scheme", std::string("always"));
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    fail("tokenizer.json: Metaspace prepend_scheme '{}' is not supported", scheme);
  }
  // As Hugging Face's JavaScript tokenizers do: spaces become the replacement, with one prepended,
  // and the text stays one word.
  return
      [replacement, scheme](std::string_view text, int64_t section, std::vector<std::string>& out) {
        std::string word;
        for (const char c : text) {
          if (c == ' ') {
            word += replacement;
          } else {
            word += c;
          }
        }
        const bool prepend = scheme == "always" || (scheme == "first" && section == 0);
        if (prepend && !word.starts_with(replacement)) word.insert(0, replacement);
        out.push_back(std::move(word));
      };
}

}  // namespace

const std::string& byte_level_char(uint8_t byte) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> chars;
    char32_t next = 256;  // bytes that are not printable map past Latin-1, in order
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      append_utf8(chars[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return chars;
  }();
  return table[byte];
}

PreTokenizer make_pre_tokenizer(const nlohmann::json& config) {
  if (config.is_null()) return {};
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<PreTokenizer> steps;
    for (const nlohmann::json& step : config.value("pretokenizers", nlohmann::json::array())) {
      if (PreTokenizer pre_tokenizer = make_pre_tokenizer(step)) {
        steps.push_back(std::move(pre_tokenizer));
      }
    }
    return [steps = std::move(steps)](std::string_view text, int64_t section,
                                      std::vector<std::string>& out) {
      std::vector<std::string> pieces{std::string(text)};
      for (const PreTokenizer& step : steps) {
        std::vector<std::string> next;
        for (const std::string& piece : pieces)
          step(piece, section, next);
        pieces = std::move(next);
      }
      for (std::string& piece : pieces)
        out.push_back(std::move(piece));
    };
  }
  if (type == "ByteLevel") return make_byte_level(config);
  if (type == "Split") return make_split(config);
  if (type == "Metaspace") return make_metaspace(config);
  if (type == "Whitespace") return matches_of(R"(\w+|[^\w\s]+)", RegexSyntax::kJavaScript);
  if (type == "WhitespaceSplit") return matches_of(R"(\S+)", RegexSyntax::kJavaScript);
  if (type == "Digits") {
    return matches_of(config.value("individual_digits", false) ? R"([^\d]+|\d)" : R"([^\d]+|\d+)",
                      RegexSyntax::kJavaScript);
  }
  if (type == "Punctuation") {
    return matches_of(fmt::format("[^{0}]+|[{0}]+", kPunctuation), RegexSyntax::kJavaScript);
  }
  if (type == "BertPreTokenizer") {
    auto regex = std::make_shared<Regex>(fmt::format(R"([^\s{0}]+|[{0}])", kPunctuation),
                                         RegexSyntax::kJavaScript);
    return [regex](std::string_view text, int64_t, std::vector<std::string>& out) {
      append_matches(*regex, trim_end(trim_start(text)), out);
    };
  }
  if (type == "Replace") {
    auto replace = make_replacer(config.at("pattern"), config.value("content", std::string()));
    return [replace](std::string_view text, int64_t, std::vector<std::string>& out) {
      out.push_back(replace(text));
    };
  }
  fail("tokenizer.json: pre-tokenizer type '{}' is not supported", type);
}

}  // namespace pagoda
