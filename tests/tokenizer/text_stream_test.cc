#include "tokenizer/text_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <span>

#include "engine/sampling_params.h"
#include "source_paths.h"
#include "tests/tokenizer/pieces.h"

namespace pagoda {
namespace {

using testing::fixture;

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

using testing::joined;

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

// Stop strings whose prefixes recur in themselves ("aab" after "aaab", "abac" after "ababac"):
// the match resumes from the longest prefix that still ends the text.
TEST(TextStreamTest, StopStringsWithRepeatedPrefixes) {
  EXPECT_EQ(joined(stream("xaaab", {"aab"}).first), "xa");
  EXPECT_EQ(joined(stream("ababac", {"abac"}).first), "ab");
  EXPECT_EQ(joined(stream("abababx", {"ababx"}).first), "ab");
  const auto [pieces, stopped] = stream("abaabab", {"abab"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(joined(pieces), "aba");
}

// Random texts over a small alphabet (with a two-byte character, which is one piece of text),
// random stop strings and random groups of tokens per add(): the text ends where a first scan of
// the whole text finds the earliest-ending stop string (the longest of those ending there), and
// add() takes the tokens up to the one that completes it.
TEST(TextStreamTest, MatchesAScanOfTheWholeText) {
  const Tokenizer tokenizer = Tokenizer::load(fixture("byte-tokenizer"));
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "\xC3\xA9"};
  const auto random_text = [&](size_t pieces) {
    std::string text;
    for (size_t i = 0; i < pieces; ++i)
      text += alphabet[rng() % alphabet.size()];
    return text;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string text = random_text(1 + rng() % 24);
    std::vector<std::string> stops;
    for (size_t s = rng() % 4; s > 0; --s)
      stops.push_back(random_text(1 + rng() % 4));
    // The scan: the first end, in bytes, of any stop string, and the longest ending there.
    size_t end = std::string::npos;
    size_t length = 0;
    for (size_t e = 1; e <= text.size() && end == std::string::npos; ++e) {
      for (const std::string& stop : stops) {
        if (stop.size() <= e && text.compare(e - stop.size(), stop.size(), stop) == 0) {
          end = e;
          length = std::max(length, stop.size());
        }
      }
    }
    TextStream out(tokenizer, stops);
    const std::vector<int32_t> ids = bytes(text);
    size_t taken = 0;
    for (size_t i = 0; i < ids.size() && !out.stopped();) {
      const size_t group = std::min<size_t>(1 + rng() % 4, ids.size() - i);
      const TextStream::Added added = out.add(std::span<const int32_t>(ids).subspan(i, group));
      taken += added.tokens;
      i += group;
    }
    if (!out.stopped()) out.finish();
    const std::string context = "text '" + text + "', trial " + std::to_string(trial);
    if (end == std::string::npos) {
      EXPECT_FALSE(out.stopped()) << context;
      EXPECT_EQ(out.text(), text) << context;
      EXPECT_EQ(taken, ids.size()) << context;
    } else {
      EXPECT_TRUE(out.stopped()) << context;
      EXPECT_EQ(out.text(), text.substr(0, end - length)) << context;
      EXPECT_EQ(taken, end) << context;  // byte tokens: the stop's last byte is token end - 1
    }
  }
}

// Many long stop strings that almost match a long repetitive output: each byte is fed once to
// each automaton, where searching the held-back text for every stop string at every token took
// 100 times as long here (7.6 s).
TEST(TextStreamTest, LongStopStringsOverALongOutput) {
  const Tokenizer tokenizer = Tokenizer::load(fixture("byte-tokenizer"));
  std::vector<std::string> stops;
  for (size_t s = 0; s < SamplingParams::kMaxStopStrings; ++s)
    stops.push_back(std::string(SamplingParams::kMaxStopBytes - 1 - s, 'a') + "b");
  TextStream out(tokenizer, stops);
  const std::string text(100000, 'a');
  for (const int32_t id : bytes(text))
    out.add(std::vector<int32_t>{id});
  EXPECT_FALSE(out.stopped());
  // All but the longest tail that could begin a stop string was sent; finish() sends that.
  EXPECT_EQ(out.text().size(), text.size() - (SamplingParams::kMaxStopBytes - 1));
  out.finish();
  EXPECT_EQ(out.text(), text);
  const std::vector<int32_t> end = bytes("b");
  TextStream stopped(tokenizer, stops);
  for (const int32_t id : bytes(text))
    stopped.add(std::vector<int32_t>{id});
  EXPECT_EQ(stopped.add(end).tokens, 1u);
  EXPECT_TRUE(stopped.stopped());
  EXPECT_EQ(stopped.text().size(), text.size() - (SamplingParams::kMaxStopBytes - 1));
}

}  // namespace
}  // namespace pagoda
