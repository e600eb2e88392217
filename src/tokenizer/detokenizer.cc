#include "tokenizer/detokenizer.h"

#include <array>
#include <string_view>

namespace pagoda {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Bytes at the end of `text` a later token could still change: replacement characters (bytes of
// a character not yet complete: at most three, as a character has at most four bytes; earlier
// ones are invalid bytes no token can mend) and, with clean-up, the start of a clean-up pattern
// (" ", " '", " n", ...), which the next token could complete.
size_t unstable_suffix(std::string_view text, bool clean_up_spaces) {
  size_t held = 0;
  while (held < 3 * kReplacementChar.size() &&
         text.substr(0, text.size() - held).ends_with(kReplacementChar)) {
    held += kReplacementChar.size();
  }
  if (!clean_up_spaces) return held;
  static constexpr std::array<std::string_view, 10> kPatterns = {
      " .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
  const std::string_view stable = text.substr(0, text.size() - held);
  size_t longest = 0;
  for (const std::string_view pattern : kPatterns) {
    for (size_t length = pattern.size() - 1; length > longest; --length) {
      if (stable.ends_with(pattern.substr(0, length))) {
        longest = length;
        break;
      }
    }
  }
  return held + longest;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               const DecodeOptions& options)
    : tokenizer_(tokenizer),
      options_(options),
      clean_up_spaces_(options.clean_up_tokenization_spaces.value_or(
          tokenizer.config().value("clean_up_tokenization_spaces", true))) {}

std::string IncrementalDetokenizer::add(std::span<const int32_t> ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  const std::span<const int32_t> all(ids_);
  const std::string done =
      tokenizer_.decode(all.subspan(window_start_, read_end_ - window_start_), options_);
  const std::string text = tokenizer_.decode(all.subspan(window_start_), options_);
  if (!std::string_view(text).starts_with(done)) return "";  // the returned part is not settled
  const std::string_view fresh = std::string_view(text).substr(done.size());
  const size_t stable = fresh.size() - unstable_suffix(fresh, clean_up_spaces_);
  std::string out;
  if (stable > returned_) out = std::string(fresh.substr(returned_, stable - returned_));
  returned_ = std::max(returned_, stable);
  if (stable == fresh.size()) {
    // Everything so far is returned: the next window starts at the tokens just read.
    move_window(ids_.size());
    returned_ = 0;
  } else if (ids_.size() - read_end_ >= move_tried_at_) {
    // The held-back text lies in the last few tokens when the decode without them is a prefix
    // that is wholly returned: the window then moves up to them. Otherwise a text that keeps
    // ending in held-back bytes (a model repeating "x ", or invalid bytes) would decode an ever
    // longer window each time. Held-back text is a few bytes, so a few tokens (unless tokens
    // with no text follow it); a window that cannot move is tried again at twice the tokens.
    constexpr size_t kMostHeldTokens = 8;
    const size_t unread = ids_.size() - read_end_;
    move_tried_at_ = 2 * unread;
    for (size_t held = 1; held <= kMostHeldTokens && held < unread; ++held) {
      const size_t end = ids_.size() - held;
      const std::string before =
          tokenizer_.decode(all.subspan(window_start_, end - window_start_), options_);
      if (std::string_view(text).starts_with(before) && before.size() >= done.size() &&
          before.size() - done.size() <= returned_) {
        returned_ -= before.size() - done.size();
        move_window(end);
        break;
      }
    }
  }
  return out;
}

void IncrementalDetokenizer::move_window(size_t read_end) {
  window_start_ = read_end_;
  read_end_ = read_end;
  move_tried_at_ = 2;
}

std::string IncrementalDetokenizer::finish() {
  const std::span<const int32_t> all(ids_);
  const std::string done =
      tokenizer_.decode(all.subspan(window_start_, read_end_ - window_start_), options_);
  const std::string text = tokenizer_.decode(all.subspan(window_start_), options_);
  window_start_ = read_end_ = ids_.size();
  const size_t from = std::min(text.size(), done.size() + returned_);
  returned_ = 0;
  return text.substr(from);
}

}  // namespace pagoda
