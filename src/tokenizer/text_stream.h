// One choice's output text as it streams: tokens are detokenized incrementally and checked for
// stop strings across token boundaries. Text that could still turn out to be the start of a stop
// string is held back, so a stop string never reaches the client. Each stop string is matched by a
// prefix automaton (Knuth-Morris-Pratt) fed each new byte once, so a step costs the stop strings'
// count times its new bytes, whatever their lengths.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/detokenizer.h"

namespace pagoda {

class TextStream {
 public:
  // Keeps a reference to `tokenizer`. Empty stop strings are ignored.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  // What add() made final, and how many of its tokens it took: all of them, unless a stop string
  // appeared, when the token that completed it is the last one taken.
  struct Added {
    std::string text;
    size_t tokens = 0;
  };
  // Adds generated tokens, one at a time. After a stop string appears, stopped() is true, the
  // returned text ends just before it, the tokens after the one that completed it are not taken,
  // and later calls take nothing. Of stop strings that overlap, the one that ends first counts (of
  // those ending at the same byte, the longest).
  Added add(std::span<const int32_t> ids);
  // The end of generation: the text still held back.
  std::string finish();
  bool stopped() const { return stopped_; }
  // Everything returned so far.
  const std::string& text() const { return text_; }

 private:
  // One stop string's automaton: `matched` is the length of the longest prefix of `text` that ends
  // the bytes fed so far; `fallback[i]` the longest proper prefix of text[0, i] that is also its
  // suffix.
  struct Matcher {
    std::string text;
    std::vector<size_t> fallback;
    size_t matched = 0;
  };
  // Feeds `piece`, which follows `held` bytes of held-back text, to every matcher; returns where
  // in the held-back text and the piece the first stop string to complete begins (of those
  // completing at one byte, the longest), or npos. The stream stops there, so no matcher is fed
  // past a completion.
  size_t feed(std::string_view piece, size_t held);
  std::string release(std::string text);  // records returned text

  IncrementalDetokenizer detokenizer_;
  std::vector<Matcher> matchers_;
  std::string held_;  // decoded, not yet returned
  std::string text_;
  bool stopped_ = false;
};

}  // namespace pagoda
