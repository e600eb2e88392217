// The byte-pair-encoding model of tokenizer.json: words → token ids by applying merges in rank
// order (leftmost first among equal ranks), with byte fallback or an unknown token for what the
// vocabulary lacks.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pagoda {

// Token ids index tables; the largest real vocabularies hold about 262k tokens, and an id beyond
// this bound is refused rather than sizing a table to match.
inline constexpr int64_t kMaxTokenId = int64_t{1} << 22;

// The byte a byte-fallback token such as "<0xE4>" stands for, or -1 for any other token.
int parse_byte_token(std::string_view token);

class BpeModel {
 public:
  // From a tokenizer.json `model` object of type BPE. Error for another type, a merge whose parts
  // or result are missing from the vocabulary, or options that are not supported.
  explicit BpeModel(const nlohmann::json& config);

  // Makes `token` (an added token) known to the model under `id`, as the reference implementations
  // do: a word or symbol equal to it then encodes to it.
  void add_token(const std::string& token, int32_t id);
  // Appends the ids of one pre-tokenized word to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  const std::string& unk_token() const { return unk_token_; }
  const std::string& end_of_word_suffix() const { return end_of_word_suffix_; }

 private:
  struct Merge {
    int32_t rank = 0;
    int32_t result = 0;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::vector<int32_t> merge_word(std::string_view word) const;
  // Ids of a piece the vocabulary lacks: its bytes as <0xXX> tokens, or the unknown token.
  void append_unknown(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string unk_token_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // <0x00>..<0xFF>, -1 where absent

  // Words seen before; bounded, cleared when full.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace pagoda
