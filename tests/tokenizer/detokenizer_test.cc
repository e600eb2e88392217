// The streaming detokenizer's property: whatever the tokens and however they arrive, the text it
// returns, concatenated, is the full decode, and no piece holds a character a later token changes.
#include "tokenizer/detokenizer.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/tokenizer/peer_data.h"
#include "tests/tokenizer/pieces.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagoda {
namespace {

class DetokenizerTest : public ::testing::TestWithParam<const char*> {};

// Streams `ids` in chunks of 1 to 3 tokens; returns the pieces, finish() last.
std::vector<std::string> stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                const DecodeOptions& options, std::mt19937& rng) {
  IncrementalDetokenizer detokenizer(tokenizer, options);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < ids.size();) {
    const size_t count = std::min<size_t>(1 + rng() % 3, ids.size() - i);
    pieces.push_back(detokenizer.add(std::span(ids).subspan(i, count)));
    i += count;
  }
  pieces.push_back(detokenizer.finish());
  return pieces;
}

using testing::joined;

// Tokens that stress streaming: single bytes (partial UTF-8 characters), special tokens, spaces
// and punctuation for the clean-up rules, and anything else in the vocabulary.
std::vector<int32_t> awkward_tokens(const Tokenizer& tokenizer) {
  std::vector<int32_t> pool;
  for (int b = 0; b < 256; ++b) {
    for (const std::string& token :
         {fmt::format("<0x{:02X}>", b), byte_level_char(static_cast<uint8_t>(b))}) {
      if (const auto id = tokenizer.token_to_id(token)) pool.push_back(*id);
    }
  }
  for (const char* text : {" ", ".", " .", " ,", "'", " '", "n't", " n", "s", "ve", "▁", "\n",
                           "Hello", " world", "é", "🤗"}) {
    for (const int32_t id : tokenizer.encode(text, {.add_special_tokens = false}))
      pool.push_back(id);
  }
  for (int32_t id = 0; id < tokenizer.vocab_size() && pool.size() < 2000; ++id) {
    if (tokenizer.is_special(id)) pool.push_back(id);
  }
  return pool;
}

TEST_P(DetokenizerTest, StreamEqualsFullDecodeForRandomTokens) {
  const Tokenizer& tokenizer = testing::peer_tokenizer(GetParam());
  const std::vector<int32_t> awkward = awkward_tokens(tokenizer);
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids;
    const int length = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < length; ++i) {
      ids.push_back(rng() % 2 == 0 ? awkward[rng() % awkward.size()]
                                   : static_cast<int32_t>(rng() % tokenizer.vocab_size()));
    }
    for (const bool skip : {false, true}) {
      const DecodeOptions options{.skip_special_tokens = skip};
      const std::vector<std::string> pieces = stream(tokenizer, ids, options, rng);
      const std::string full = tokenizer.decode(ids, options);
      // Equality with the full decode also means no piece returned a replacement character
      // for bytes a later token completed.
      ASSERT_EQ(joined(pieces), full) << "ids " << nlohmann::json(ids).dump();
    }
  }
}

TEST_P(DetokenizerTest, StreamEqualsFullDecodeOnTheCorpus) {
  const std::string name = GetParam();
  const Tokenizer& tokenizer = testing::peer_tokenizer(name);
  std::ifstream file(testing::peer_output("tokenize-" + name + ".jsonl"));
  std::mt19937 rng(5);
  std::string line;
  int64_t checked = 0;
  while (std::getline(file, line)) {
    const nlohmann::json expected = nlohmann::json::parse(line);
    const auto ids = expected["ids"].get<std::vector<int32_t>>();
    if (ids.empty()) continue;
    // Streamed text equals the peer's full decode.
    const std::vector<std::string> pieces = stream(tokenizer, ids, {}, rng);
    ASSERT_EQ(joined(pieces), expected["decoded"].get<std::string>()) << line;
    ++checked;
  }
  EXPECT_GE(checked, 2000);
}

// Outputs that keep ending in held-back bytes: a space a clean-up rule could still remove, and
// invalid bytes that read as replacement characters. Streamed a token at a time they still equal
// the full decode, with the window moving up to the last token (it grew with the output, and each
// token decoded all of it: quadratic).
TEST_P(DetokenizerTest, OutputsEndingInHeldBackBytesStillStream) {
  const Tokenizer& tokenizer = testing::peer_tokenizer(GetParam());
  std::vector<int32_t> spaced;
  const std::vector<int32_t> word = tokenizer.encode("x ", {.add_special_tokens = false});
  for (int i = 0; i < 1500; ++i)
    spaced.insert(spaced.end(), word.begin(), word.end());
  spaced.insert(spaced.end(), word.begin(), word.end());
  const std::vector<int32_t> period = tokenizer.encode(".", {.add_special_tokens = false});
  spaced.insert(spaced.end(), period.begin(), period.end());
  std::vector<int32_t> invalid;
  for (const std::string& token : {std::string("<0x80>"), byte_level_char(0x80)}) {
    if (const auto id = tokenizer.token_to_id(token)) invalid.assign(1500, *id);
  }
  for (const std::vector<int32_t>* ids : {&spaced, &invalid}) {
    if (ids->empty()) continue;
    IncrementalDetokenizer detokenizer(tokenizer);
    std::string streamed;
    for (size_t i = 0; i < ids->size(); ++i)
      streamed += detokenizer.add(std::span(*ids).subspan(i, 1));
    streamed += detokenizer.finish();
    EXPECT_EQ(streamed, tokenizer.decode(*ids));
  }
}

TEST(DetokenizerTest, HoldsPartialCharactersAndReturnsThemWhole) {
  const Tokenizer& tokenizer = testing::peer_tokenizer("gemma3");
  // "é" as two byte-fallback tokens: nothing after the first, the whole character after the
  // second.
  const std::vector<int32_t> bytes = {*tokenizer.token_to_id("<0xC3>"),
                                      *tokenizer.token_to_id("<0xA9>")};
  IncrementalDetokenizer detokenizer(tokenizer);
  EXPECT_EQ(detokenizer.add(std::span(bytes).first(1)), "");
  EXPECT_EQ(detokenizer.add(std::span(bytes).last(1)), "é");
  EXPECT_EQ(detokenizer.finish(), "");
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, DetokenizerTest,
                         ::testing::ValuesIn(testing::kPeerTokenizers));

}  // namespace
}  // namespace pagoda
