// A Hugging Face tokenizer loaded from tokenizer.json and tokenizer_config.json: added tokens are
// matched first (longest match, leftmost first), the rest is normalized, pre-tokenized and encoded
// by the BPE model, and the post-processor adds special tokens. Decoding runs the decoder chain.
// Anything the files declare that is not supported is an Error naming the component.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagoda {

struct EncodeOptions {
  bool add_special_tokens = true;  // what the post-processor adds (e.g. BOS)
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // Default: tokenizer_config.json's clean_up_tokenization_spaces (true when absent).
  std::optional<bool> clean_up_tokenization_spaces;
};

class Tokenizer {
 public:
  // Reads `dir`/tokenizer.json, tokenizer_config.json (optional) and a chat template from
  // chat_template.jinja, chat_template.json or the config. Error naming the file and problem.
  static Tokenizer load(const std::string& dir);
  Tokenizer(const nlohmann::json& tokenizer_json, const nlohmann::json& config);

  // Text (invalid UTF-8 is read with replacement characters) → token ids.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Token ids → text. An id past the vocabulary (a model's padded rows) has no text; Error for a
  // negative id.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id`; Error outside the vocabulary.
  const std::string& id_to_token(int32_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  bool is_special(int32_t id) const;

  // Token strings from tokenizer_config.json; empty when not set.
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // The chat template (Jinja source); empty when the model has none.
  const std::string& chat_template() const { return chat_template_; }
  void set_chat_template(std::string source) { chat_template_ = std::move(source); }
  const nlohmann::json& config() const { return config_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool lstrip = false;
    bool rstrip = false;
    bool special = false;
  };
  // Leftmost-longest matching of added tokens' contents, on bytes.
  class Matcher {
   public:
    void add(const std::string& content, int32_t token);
    // Pieces of `text`: (piece, added token index or -1).
    std::vector<std::pair<std::string, int32_t>> split(std::string_view text) const;

   private:
    int32_t child(int32_t node, unsigned char byte) const;
    std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) → node
    std::vector<int32_t> ends_{-1};                // per node: the token ending there, or -1
  };

  void encode_section(std::string_view text, int64_t section, std::vector<int32_t>& out) const;
  // Trims neighbours of added tokens that strip whitespace on their left or right.
  void strip_around_added(std::vector<std::pair<std::string, int32_t>>& pieces) const;

  nlohmann::json config_;
  std::unique_ptr<BpeModel> model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  PostProcessor post_processor_;
  Decoder decoder_;
  std::vector<AddedToken> added_;
  Matcher raw_matcher_;              // added tokens matched before normalization
  Matcher normalized_matcher_;       // those marked `normalized`, matched after it
  std::vector<std::string> tokens_;  // by id
  std::unordered_set<std::string> special_tokens_;
  std::string bos_token_;
  std::string eos_token_;
  std::string chat_template_;
  bool clean_up_spaces_ = true;
  bool remove_space_ = false;
  bool lowercase_and_remove_accent_ = false;
};

}  // namespace pagoda
