#include "tokenizer/text_stream.h"

#include <algorithm>

namespace pagoda {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : detokenizer_(tokenizer, {.skip_special_tokens = true}) {
  for (std::string& stop : stop_strings) {
    if (stop.empty()) continue;
    Matcher matcher{std::move(stop), {}, 0};
    const std::string& text = matcher.text;
    matcher.fallback.assign(text.size(), 0);
    for (size_t i = 1, length = 0; i < text.size(); ++i) {
      while (length > 0 && text[i] != text[length])
        length = matcher.fallback[length - 1];
      if (text[i] == text[length]) ++length;
      matcher.fallback[i] = length;
    }
    matchers_.push_back(std::move(matcher));
  }
}

size_t TextStream::feed(std::string_view piece, size_t held) {
  for (size_t i = 0; i < piece.size(); ++i) {
    size_t completed = 0;
    for (Matcher& m : matchers_) {
      while (m.matched > 0 && piece[i] != m.text[m.matched])
        m.matched = m.fallback[m.matched - 1];
      if (piece[i] == m.text[m.matched]) ++m.matched;
      if (m.matched == m.text.size()) completed = std::max(completed, m.matched);
    }
    if (completed > 0) return held + i + 1 - completed;
  }
  return std::string_view::npos;
}

std::string TextStream::release(std::string text) {
  text_ += text;
  return text;
}

TextStream::Added TextStream::add(std::span<const int32_t> ids) {
  if (stopped_) return {};
  for (size_t taken = 1; taken <= ids.size(); ++taken) {
    const std::string piece = detokenizer_.add(ids.subspan(taken - 1, 1));
    const size_t stop = feed(piece, held_.size());
    held_ += piece;
    if (stop != std::string_view::npos) {
      // The stop string lies in the held-back text and this piece: nothing before it was sent.
      stopped_ = true;
      return {release(held_.substr(0, stop)), taken};
    }
  }
  // Hold back the longest tail that begins some stop string.
  size_t keep = 0;
  for (const Matcher& m : matchers_)
    keep = std::max(keep, m.matched);
  std::string ready = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return {release(std::move(ready)), ids.size()};
}

std::string TextStream::finish() {
  if (stopped_) return "";
  const std::string piece = detokenizer_.finish();
  const size_t stop = feed(piece, held_.size());
  std::string rest = held_ + piece;
  held_.clear();
  if (stop != std::string_view::npos) {
    stopped_ = true;
    rest.resize(stop);
  }
  return release(std::move(rest));
}

}  // namespace pagoda
