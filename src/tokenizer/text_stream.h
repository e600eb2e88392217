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

  // Adds generated tokens; returns the text that became final. After a stop string appears,
  // stopped() is true, the returned text ends just before it and later calls return nothing.
  std::string add(std::span<const int32_t> ids);
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
