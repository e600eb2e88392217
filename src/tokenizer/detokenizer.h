// Streaming detokenization: text for tokens as they are generated. Each call returns only text
// that no later token can change — complete UTF-8 characters, and (when the tokenizer cleans up
// tokenization spaces) no trailing text a later token could rewrite — so that the concatenation
// of everything returned, finish() included, equals the full decode of all the tokens.
//
// It decodes a short window of recent tokens rather than everything: the window starts where the
// last fully returned text ended, and the new text is the window's decode minus the decode of its
// already-returned part, so effects at the start of a decode (a stripped leading space) cancel.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

class IncrementalDetokenizer {
 public:
  // Keeps a reference to `tokenizer`, which must outlive it.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, const DecodeOptions& options = {});

  // Adds generated tokens; returns the text that became final.
  std::string add(std::span<const int32_t> ids);
  // The text still held back, at the end of the stream.
  std::string finish();
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions options_;
  bool clean_up_spaces_;
  std::vector<int32_t> ids_;
  size_t window_start_ = 0;  // the window: ids_[window_start_, ...)
  size_t read_end_ = 0;      // ids_[window_start_, read_end_) are wholly returned
  size_t returned_ = 0;      // bytes returned beyond the decode of that part
  // Unread tokens (past read_end_) at which a window whose end is held back next tries to move.
  size_t move_tried_at_ = 2;

  // The window starts at read_end_, and ids_[.., read_end) become the wholly returned part.
  void move_window(size_t read_end);
};

}  // namespace pagoda
