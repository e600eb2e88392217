#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "core/files.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

// A token named in tokenizer_config.json: a string, or an object with its `content`.
std::string config_token(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const nlohmann::json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return "";
}

// The chat template in tokenizer_config.json: a string, or a list of named templates of which
// "default" is taken.
std::string config_chat_template(const nlohmann::json& config) {
  if (!config.contains("chat_template")) return "";
  const nlohmann::json& value = config["chat_template"];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const nlohmann::json& entry : value) {
      if (entry.value("name", std::string()) == "default" && entry.contains("template")) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return "";
}

}  // namespace

void Tokenizer::Matcher::add(const std::string& content, int32_t token) {
  if (content.empty()) return;
  int32_t node = 0;
  for (const char c : content) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
    const auto it = edges_.find(key);
    if (it != edges_.end()) {
      node = it->second;
    } else {
      const int32_t created = static_cast<int32_t>(ends_.size());
      ends_.push_back(-1);
      edges_.emplace(key, created);
      node = created;
    }
  }
  if (ends_[node] < 0) ends_[node] = token;
}

int32_t Tokenizer::Matcher::child(int32_t node, unsigned char byte) const {
  const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

std::vector<std::pair<std::string, int32_t>> Tokenizer::Matcher::split(
    std::string_view text) const {
  std::vector<std::pair<std::string, int32_t>> pieces;
  size_t start = 0;  // the first byte not yet in a piece
  for (size_t i = 0; i < text.size();) {
    int32_t token = -1;
    size_t length = 0;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (ends_[node] >= 0) {
        token = ends_[node];
        length = j + 1 - i;
      }
    }
    if (token < 0) {
      ++i;
      continue;
    }
    if (i > start) pieces.emplace_back(text.substr(start, i - start), -1);
    pieces.emplace_back(text.substr(i, length), token);
    i += length;
    start = i;
  }
  if (start < text.size()) pieces.emplace_back(text.substr(start), -1);
  return pieces;
}

Tokenizer Tokenizer::load(const std::string& dir) {
  const std::string config_path = dir + "/tokenizer_config.json";
  const nlohmann::json config =
      path_exists(config_path) ? read_json_file(config_path) : nlohmann::json::object();
  const std::string json_path = dir + "/tokenizer.json";
  Tokenizer tokenizer = [&] {
    try {
      return Tokenizer(read_json_file(json_path), config);
    } catch (const nlohmann::json::exception& error) {
      fail("{}: unexpected structure: {}", json_path, error.what());
    }
  }();
  if (path_exists(dir + "/chat_template.jinja")) {
    tokenizer.chat_template_ = read_text_file(dir + "/chat_template.jinja");
  } else if (const std::string path = dir + "/chat_template.json"; path_exists(path)) {
    try {
      const nlohmann::json file = read_json_file(path);
      if (!file.is_object() || !file.contains("chat_template")) {
        fail("{}: expected an object with a \"chat_template\"", path);
      }
      tokenizer.chat_template_ = config_chat_template(file);
    } catch (const nlohmann::json::exception& error) {
      fail("{}: {}", path, describe_json_error(error));
    }
  }
  return tokenizer;
}

// A field of the wrong type or a missing one, deep in the file, is an Error naming the file.
Tokenizer::Tokenizer(const nlohmann::json& tokenizer_json, const nlohmann::json& config) try
    : config_(config.is_object() ? config : nlohmann::json::object()) {
  if (!tokenizer_json.is_object() || !tokenizer_json.contains("model")) {
    fail("tokenizer.json has no model");
  }
  model_ = std::make_unique<BpeModel>(tokenizer_json.at("model"));
  normalizer_ = make_normalizer(tokenizer_json.value("normalizer", nlohmann::json()));
  pre_tokenizer_ = make_pre_tokenizer(tokenizer_json.value("pre_tokenizer", nlohmann::json()));

  for (const auto& [token, id] : model_->vocab()) {
    if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1);
    tokens_[id] = token;
  }
  std::unordered_set<std::string> added_contents;
  for (const nlohmann::json& entry :
       tokenizer_json.value("added_tokens", nlohmann::json::array())) {
    AddedToken token{
        .content = entry.at("content").get<std::string>(),
        .id = static_cast<int32_t>(json_integer(entry.at("id"), 0, kMaxTokenId - 1,
                                                "tokenizer.json: an added token's id")),
        .lstrip = entry.value("lstrip", false),
        .rstrip = entry.value("rstrip", false),
        .special = entry.value("special", false)};
    const int32_t index = static_cast<int32_t>(added_.size());
    if (entry.value("normalized", false) && normalizer_) {
      normalized_matcher_.add(normalizer_(token.content), index);
    } else {
      raw_matcher_.add(token.content, index);
    }
    model_->add_token(token.content, token.id);
    if (static_cast<size_t>(token.id) >= tokens_.size()) tokens_.resize(token.id + 1);
    tokens_[token.id] = token.content;
    if (token.special) special_tokens_.insert(token.content);
    added_contents.insert(token.content);
    added_.push_back(std::move(token));
  }
  for (const nlohmann::json& extra :
       config_.value("additional_special_tokens", nlohmann::json::array())) {
    if (extra.is_string()) special_tokens_.insert(extra.get<std::string>());
    if (extra.is_object() && extra.contains("content")) {
      special_tokens_.insert(extra["content"].get<std::string>());
    }
  }
  post_processor_ = make_post_processor(
      tokenizer_json.value("post_processor", nlohmann::json()), [this](const std::string& token) {
        const std::optional<int32_t> id = token_to_id(token);
        if (!id) fail("tokenizer.json: post-processor token '{}' is not in the vocabulary", token);
        return *id;
      });
  decoder_ = make_decoder(tokenizer_json.value("decoder", nlohmann::json()), added_contents);

  bos_token_ = config_token(config_, "bos_token");
  eos_token_ = config_token(config_, "eos_token");
  chat_template_ = config_chat_template(config_);
  clean_up_spaces_ = config_.value("clean_up_tokenization_spaces", true);
  remove_space_ = config_.value("remove_space", false);
  lowercase_and_remove_accent_ = config_.value("do_lowercase_and_remove_accent", false);
} catch (const nlohmann::json::exception& error) {
  fail("tokenizer.json or tokenizer_config.json: {}", describe_json_error(error));
}

void Tokenizer::strip_around_added(std::vector<std::pair<std::string, int32_t>>& pieces) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].second < 0) continue;
    const AddedToken& token = added_[pieces[i].second];
    if (token.lstrip && i > 0) pieces[i - 1].first = std::string(trim_end(pieces[i - 1].first));
    if (token.rstrip && i + 1 < pieces.size()) {
      pieces[i + 1].first = std::string(trim_start(pieces[i + 1].first));
    }
  }
}

void Tokenizer::encode_section(std::string_view text, int64_t section,
                               std::vector<int32_t>& out) const {
  std::string normalized(text);
  if (remove_space_) {
    // Trimmed, with every run of white space made one space.
    std::string collapsed;
    bool in_space = false;
    for (const std::string& c : split_code_points(trim_end(trim_start(normalized)))) {
      size_t pos = 0;
      if (is_js_whitespace(next_code_point(c, pos))) {
        in_space = true;
        continue;
      }
      if (in_space) collapsed += ' ';
      in_space = false;
      collapsed += c;
    }
    normalized = std::move(collapsed);
  }
  if (lowercase_and_remove_accent_) normalized = strip_marks(to_lower(normalized));
  if (normalizer_) normalized = normalizer_(normalized);
  if (normalized.empty()) return;
  std::vector<std::pair<std::string, int32_t>> pieces = normalized_matcher_.split(normalized);
  strip_around_added(pieces);
  std::vector<std::string> words;
  for (const auto& [piece, added] : pieces) {
    if (piece.empty()) continue;
    if (added >= 0) {
      out.push_back(added_[added].id);
      continue;
    }
    words.clear();
    if (pre_tokenizer_) {
      pre_tokenizer_(piece, section, words);
    } else {
      words.push_back(piece);
    }
    for (const std::string& word : words)
      model_->encode_word(word, out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const std::string valid = to_valid_utf8(text);
  std::vector<std::pair<std::string, int32_t>> sections = raw_matcher_.split(valid);
  strip_around_added(sections);
  std::vector<int32_t> ids;
  for (size_t s = 0; s < sections.size(); ++s) {
    const auto& [piece, added] = sections[s];
    if (piece.empty()) continue;
    if (added >= 0) {
      ids.push_back(added_[added].id);
    } else {
      encode_section(piece, static_cast<int64_t>(s), ids);
    }
  }
  if (post_processor_) ids = post_processor_(std::move(ids), options.add_special_tokens);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    // A model's vocabulary may be padded past the tokenizer's (Qwen 2.5: 152064 rows for 151665
    // tokens): such an id has no text, as transformers decodes it.
    if (id >= vocab_size()) continue;
    const std::string& token = id_to_token(id);
    if (options.skip_special_tokens && special_tokens_.count(token) != 0) continue;
    tokens.push_back(token);
  }
  std::string text;
  if (decoder_) {
    for (const std::string& piece : decoder_(std::move(tokens)))
      text += piece;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i)
      text += (i > 0 ? " " : "") + tokens[i];
  }
  if (decoder_ && !model_->end_of_word_suffix().empty()) {
    text = make_replacer({{"String", model_->end_of_word_suffix()}}, " ")(text);
    if (options.skip_special_tokens) text = std::string(trim_end(trim_start(text)));
  }
  if (options.clean_up_tokenization_spaces.value_or(clean_up_spaces_)) {
    text = clean_up_tokenization_spaces(text);
  }
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = model_->vocab().find(std::string(token));
  if (it == model_->vocab().end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    fail("token id {} is outside the vocabulary (0..{})", id, vocab_size() - 1);
  }
  return tokens_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_tokens_.count(tokens_[id]) != 0;
}

}  // namespace pagoda
