#include "tokenizer/decoder.h"

#include <array>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

using Pieces = std::vector<std::string>;

// Byte-level text back to bytes, decoded as UTF-8 with replacement characters.
std::string from_byte_level(const std::string& text) {
  static const std::unordered_map<char32_t, uint8_t> bytes = [] {
    std::unordered_map<char32_t, uint8_t> map;
    for (int b = 0; b < 256; ++b) {
      size_t pos = 0;
      map[next_code_point(byte_level_char(static_cast<uint8_t>(b)), pos)] = static_cast<uint8_t>(b);
    }
    return map;
  }();
  std::string raw;
  for (size_t pos = 0; pos < text.size();) {
    const auto it = bytes.find(next_code_point(text, pos));
    raw += static_cast<char>(it == bytes.end() ? 0 : it->second);
  }
  return to_valid_utf8(raw);
}

Decoder byte_level(const std::unordered_set<std::string>& added_tokens) {
  return [added_tokens](Pieces tokens) {
    Pieces out;
    std::string run;  // consecutive byte-level tokens, decoded together
    for (std::string& token : tokens) {
      if (added_tokens.count(token) != 0) {
        if (!run.empty()) out.push_back(from_byte_level(run));
        run.clear();
        out.push_back(std::move(token));
      } else {
        run += token;
      }
    }
    if (!run.empty()) out.push_back(from_byte_level(run));
    return out;
  };
}

Decoder byte_fallback() {
  return [](Pieces tokens) {
    Pieces out;
    std::string bytes;
    bool in_run = false;
    for (std::string& token : tokens) {
      const int value = parse_byte_token(token);
      if (value >= 0) {
        bytes += static_cast<char>(value);
        in_run = true;
        continue;
      }
      if (in_run) out.push_back(to_valid_utf8(bytes));
      bytes.clear();
      in_run = false;
      out.push_back(std::move(token));
    }
    if (in_run) out.push_back(to_valid_utf8(bytes));
    return out;
  };
}

Decoder strip(const nlohmann::json& config) {
  const std::string content = config.value("content", std::string());
  const int64_t start = config.value("start", int64_t{0});
  const int64_t stop = config.value("stop", int64_t{0});
  return [=](Pieces tokens) {
    for (std::string& token : tokens) {
      if (content.empty()) continue;
      const std::vector<std::string> chars = split_code_points(token);
      size_t first = 0;
      while (first < chars.size() && static_cast<int64_t>(first) < start && chars[first] == content)
        ++first;
      size_t last = chars.size();
      while (last > first && static_cast<int64_t>(chars.size() - last) < stop &&
             chars[last - 1] == content)
        --last;
      std::string kept;
      for (size_t i = first; i < last; ++i)
        kept += chars[i];
      token = std::move(kept);
    }
    return tokens;
  };
}

Decoder metaspace(const nlohmann::json& config) {
  auto replace =
      make_replacer({{"String", config.value("replacement", std::string("\u2581"))}}, " ");
  return [replace](Pieces tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = replace(tokens[i]);
      if (i == 0 && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
    }
    return tokens;
  };
}

Decoder word_piece(const nlohmann::json& config) {
  const std::string prefix = config.value("prefix", std::string("##"));
  const bool cleanup = config.value("cleanup", true);
  return [prefix, cleanup](Pieces tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i != 0) {
        if (!prefix.empty() && tokens[i].starts_with(prefix)) {
          tokens[i].erase(0, prefix.size());
        } else {
          tokens[i] = " " + tokens[i];
        }
      }
      if (cleanup) tokens[i] = clean_up_tokenization_spaces(tokens[i]);
    }
    return tokens;
  };
}

}  // namespace

std::string clean_up_tokenization_spaces(std::string_view text) {
  // Each replacement runs over the whole text in turn, as the reference implementations do.
  static const std::array<std::pair<std::string_view, std::string_view>, 10> kRules = {{
      {" .", "."},
      {" ?", "?"},
      {" !", "!"},
      {" ,", ","},
      {" ' ", "'"},
      {" n't", "n't"},
      {" 'm", "'m"},
      {" 's", "'s"},
      {" 've", "'ve"},
      {" 're", "'re"},
  }};
  std::string out(text);
  for (const auto& [from, to] : kRules) {
    std::string next;
    size_t copied = 0;
    for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, copied)) {
      next.append(out, copied, at - copied);
      next.append(to);
      copied = at + from.size();
    }
    next.append(out, copied);
    out = std::move(next);
  }
  return out;
}

Decoder make_decoder(const nlohmann::json& config,
                     const std::unordered_set<std::string>& added_tokens) {
  if (config.is_null()) return {};
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<Decoder> steps;
    for (const nlohmann::json& step : config.value("decoders", nlohmann::json::array())) {
      if (Decoder decoder = make_decoder(step, added_tokens)) steps.push_back(std::move(decoder));
    }
    return [steps = std::move(steps)](Pieces tokens) {
      for (const Decoder& step : steps)
        tokens = step(std::move(tokens));
      return tokens;
    };
  }
  if (type == "ByteLevel") return byte_level(added_tokens);
  if (type == "ByteFallback") return byte_fallback();
  if (type == "Fuse") {
    return [](Pieces tokens) {
      std::string joined;
      for (const std::string& token : tokens)
        joined += token;
      return Pieces{std::move(joined)};
    };
  }
  if (type == "Strip") return strip(config);
  if (type == "Metaspace") return metaspace(config);
  if (type == "WordPiece") return word_piece(config);
  if (type == "Replace") {
    auto replace = make_replacer(config.at("pattern"), config.value("content", std::string()));
    return [replace](Pieces tokens) {
      for (std::string& token : tokens)
        token = replace(token);
      return tokens;
    };
  }
  if (type == "BPEDecoder") {
    auto to_space = make_replacer({{"String", config.value("suffix", std::string())}}, " ");
    auto to_nothing = make_replacer({{"String", config.value("suffix", std::string())}}, "");
    return [to_space, to_nothing](Pieces tokens) {
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = i + 1 == tokens.size() ? to_nothing(tokens[i]) : to_space(tokens[i]);
      return tokens;
    };
  }
  fail("tokenizer.json: decoder type '{}' is not supported", type);
}

}  // namespace pagoda
