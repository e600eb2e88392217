#include "tokenizer/text_stream.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

std::string fixture(const std::string& name) {
  return std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// The byte tokenizer: token ids are UTF-8 bytes, so streams are easy to write down.
std::vector<int32_t> bytes(const std::string& text) {
  return std::vector<int32_t>(reinterpret_cast<const uint8_t*>(text.data()),
                              reinterpret_cast<const uint8_t*>(text.data()) + text.size());
}

// Streams `text` one byte-token at a time; returns the pieces and whether it stopped.
std::pair<std::vector<std::string>, bool> stream(const std::string& text,
                                                 std::vector<std::string> stops) {
  static const Tokenizer tokenizer = Tokenizer::load(fixture("byte-tokenizer"));
  TextStream out(tokenizer, std::move(stops));
  std::vector<std::string> pieces;
  for (const int32_t id : bytes(text)) {
    pieces.push_back(out.add(std::vector<int32_t>{id}).text);
    if (out.stopped()) break;
  }
  if (!out.stopped()) pieces.push_back(out.finish());
  std::string joined;
  for (const std::string& piece : pieces)
    joined += piece;
  EXPECT_EQ(joined, out.text());
  return {pieces, out.stopped()};
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string text;
  for (const std::string& piece : pieces)
    text += piece;
  return text;
}

TEST(TextStreamTest, StopStringsEndTheTextAcrossTokens) {
  auto [pieces, stopped] = stream("Hello world, and more", {"wor", "xyz"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(joined(pieces), "Hello ");
  // "w" and "wo" were held back, never sent.
  for (const std::string& piece : pieces)
    EXPECT_EQ(piece.find('w'), std::string::npos);
}

// Several tokens at once (a step that kept drafts): the token that completes the stop string is
// the last one taken; later calls take nothing.
TEST(TextStreamTest, AStopInsideSeveralTokensTakesThoseUpToIt) {
  const Tokenizer tokenizer = Tokenizer::load(fixture("byte-tokenizer"));
  TextStream out(tokenizer, {"wor"});
  const TextStream::Added first = out.add(bytes("Hello w"));
  EXPECT_EQ(first.text, "Hello ");  // "w" held back
  EXPECT_EQ(first.tokens, 7u);
  EXPECT_FALSE(out.stopped());
  const TextStream::Added second = out.add(bytes("orld, and more"));
  EXPECT_TRUE(out.stopped());
  EXPECT_EQ(second.text, "");
  EXPECT_EQ(second.tokens, 2u);  // "o", "r"
  const TextStream::Added after = out.add(bytes("abc"));
  EXPECT_EQ(after.text, "");
  EXPECT_EQ(after.tokens, 0u);
  EXPECT_EQ(out.text(), "Hello ");
}

TEST(TextStreamTest, HeldTextIsReleasedWhenTheStopDoesNotComplete) {
  auto [pieces, stopped] = stream("a wo b we", {"wor"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(joined(pieces), "a wo b we");  // "we" held to the end, then released by finish()
}

TEST(TextStreamTest, EarliestOfSeveralStopsWins) {
  auto [pieces, stopped] = stream("one two three", {"three", "two"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(joined(pieces), "one ");
}

TEST(TextStreamTest, MultiByteCharactersAndNoStops) {
  auto [pieces, stopped] = stream("héllo 🤗 wörld", {});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(joined(pieces), "héllo 🤗 wörld");
  for (const std::string& piece : pieces)
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);  // never half a character
  auto [stopped_pieces, did_stop] = stream("héllo 🤗 wörld", {"🤗"});
  EXPECT_TRUE(did_stop);
  EXPECT_EQ(joined(stopped_pieces), "héllo ");
}

}  // namespace
}  // namespace pagoda
