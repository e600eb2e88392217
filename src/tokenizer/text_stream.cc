#include "tokenizer/text_stream.h"

#include <algorithm>

namespace pagoda {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : detokenizer_(tokenizer, {.skip_special_tokens = true}) {
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stop_strings_.push_back(std::move(stop));
  }
}

size_t TextStream::first_stop(std::string_view text) const {
  size_t first = std::string::npos;
  for (const std::string& stop : stop_strings_)
    first = std::min(first, text.find(stop));
  return first;
}

std::string TextStream::release(std::string text) {
  text_ += text;
  return text;
}

TextStream::Added TextStream::add(std::span<const int32_t> ids) {
  if (stopped_) return {};
  for (size_t taken = 1; taken <= ids.size(); ++taken) {
    held_ += detokenizer_.add(ids.subspan(taken - 1, 1));
    // The earliest stop string ends the text there.
    if (const size_t first = first_stop(held_); first != std::string::npos) {
      stopped_ = true;
      return {release(held_.substr(0, first)), taken};
    }
  }
  // Hold back the longest tail that begins some stop string.
  size_t keep = 0;
  for (const std::string& stop : stop_strings_) {
    for (size_t length = std::min(stop.size() - 1, held_.size()); length > keep; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        keep = length;
        break;
      }
    }
  }
  std::string ready = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return {release(std::move(ready)), ids.size()};
}

std::string TextStream::finish() {
  if (stopped_) return "";
  std::string rest = held_ + detokenizer_.finish();
  held_.clear();
  if (const size_t first = first_stop(rest); first != std::string::npos) {
    stopped_ = true;
    rest.resize(first);
  }
  return release(std::move(rest));
}

}  // namespace pagoda
