// One choice's output text as it streams: tokens are detokenized incrementally and checked for
// stop strings across token boundaries. Text that could still turn out to be the start of a stop
// string is held back, so a stop string never reaches the client.
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
  // and later calls take nothing.
  Added add(std::span<const int32_t> ids);
  // The end of generation: the text still held back.
  std::string finish();
  bool stopped() const { return stopped_; }
  // Everything returned so far.
  const std::string& text() const { return text_; }

 private:
  size_t first_stop(std::string_view text) const;  // npos when no stop string occurs
  std::string release(std::string text);           // records returned text

  IncrementalDetokenizer detokenizer_;
  std::vector<std::string> stop_strings_;
  std::string held_;  // decoded, not yet returned
  std::string text_;
  bool stopped_ = false;
};

}  // namespace pagoda
