#include "tokenizer/bpe.h"

#include <queue>

#include "core/error.h"
#include "core/files.h"
#include "tokenizer/unicode.h"

namespace pagoda {
namespace {

constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kLongestCachedWord = 256;  // bytes

std::pair<std::string, std::string> parse_merge(const nlohmann::json& merge) {
  if (merge.is_array() && merge.size() == 2) {
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  if (merge.is_string()) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    if (space != std::string::npos) {
      const size_t end = text.find(' ', space + 1);
      return {text.substr(0, space), text.substr(space + 1, end - space - 1)};
    }
  }
  fail("tokenizer.json: a BPE merge must be \"a b\" or [\"a\", \"b\"], not {}", merge.dump());
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& config) {
  const std::string type = config.value("type", std::string("BPE"));
  if (type != "BPE") fail("tokenizer.json: model type '{}' is not supported (BPE only)", type);
  for (const auto& [token, id] : config.at("vocab").items()) {
    vocab_[token] = static_cast<int32_t>(
        json_integer(id, 0, kMaxTokenId - 1, "tokenizer.json: the id of token '" + token + "'"));
  }
  const nlohmann::json& merges = config.at("merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = parse_merge(merges[rank]);
    const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      fail("tokenizer.json: merge {} ('{}' '{}') uses tokens missing from the vocabulary", rank,
           left, right);
    }
    merges_.try_emplace(pair_key(l->second, r->second),
                        Merge{static_cast<int32_t>(rank), m->second});
  }
  const auto text_field = [&](const char* key) {
    return config.contains(key) && config[key].is_string() ? config[key].get<std::string>()
                                                           : std::string();
  };
  unk_token_ = text_field("unk_token");
  if (const auto it = vocab_.find(unk_token_); !unk_token_.empty() && it != vocab_.end()) {
    unk_id_ = it->second;
  }
  end_of_word_suffix_ = text_field("end_of_word_suffix");
  if (!text_field("continuing_subword_prefix").empty()) {
    fail("tokenizer.json: BPE continuing_subword_prefix is not supported");
  }
  if (config.contains("dropout") && config["dropout"].is_number() &&
      config["dropout"].get<double>() > 0) {
    fail("tokenizer.json: BPE dropout is not supported");
  }
  byte_fallback_ = config.value("byte_fallback", false);
  ignore_merges_ = config.value("ignore_merges", false);
  byte_ids_.assign(256, -1);
  for (const auto& [token, id] : vocab_) {
    if (const int byte = parse_byte_token(token); byte >= 0) byte_ids_[byte] = id;
  }
}

int parse_byte_token(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
  int value = 0;
  for (const char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

void BpeModel::add_token(const std::string& token, int32_t id) {
  vocab_[token] = id;
  if (const int byte = parse_byte_token(token); byte >= 0) byte_ids_[byte] = id;
}

void BpeModel::append_unknown(std::string_view piece, std::vector<int32_t>& out) const {
  if (byte_fallback_) {
    bool all = true;
    for (const char c : piece)
      all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (const char c : piece)
        out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      return;
    }
  }
  if (unk_id_) out.push_back(*unk_id_);
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  // Symbols: the word's code points (the last one with the end-of-word suffix), as a linked list.
  std::vector<std::string> chars = split_code_points(word);
  if (chars.empty()) return {};
  if (!end_of_word_suffix_.empty()) chars.back() += end_of_word_suffix_;
  struct Symbol {
    int32_t id;  // -1: not in the vocabulary (never merges)
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols(chars.size());
  for (size_t i = 0; i < chars.size(); ++i) {
    const auto it = vocab_.find(chars[i]);
    symbols[i] = {it == vocab_.end() ? -1 : it->second, static_cast<int32_t>(i) - 1,
                  i + 1 < chars.size() ? static_cast<int32_t>(i + 1) : -1, true};
  }
  // Candidate merges by (rank, position of the left symbol): the lowest rank first, then the
  // leftmost. Entries go stale when a neighbour merges; they are checked when popped.
  using Candidate = std::pair<int32_t, int32_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.emplace(it->second.rank, left);
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    push(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const auto [rank, left] = queue.top();
    queue.pop();
    const int32_t right = symbols[left].next;
    if (!symbols[left].alive || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) {
      continue;
    }
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it == merges_.end() || it->second.rank != rank) continue;  // stale
    symbols[left].id = it->second.result;
    chars[left] += chars[right];
    symbols[right].alive = false;
    symbols[left].next = symbols[right].next;
    if (symbols[right].next >= 0) symbols[symbols[right].next].prev = left;
    if (symbols[left].prev >= 0) push(symbols[left].prev);
    push(left);
  }
  std::vector<int32_t> ids;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) {
      ids.push_back(symbols[i].id);
    } else {
      append_unknown(chars[i], ids);
    }
  }
  return ids;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(std::string(word)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kLongestCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto it = cache_.find(std::string(word)); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(word, std::move(ids));
  }
}

}  // namespace pagoda
