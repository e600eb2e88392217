// Encoding arbitrary bytes (invalid UTF-8 included) with the real tokenizers in the tree, and
// decoding arbitrary ids; a round trip of valid UTF-8 must give the text back where the tokenizer
// is lossless (the byte-level ones).
#include <memory>

#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

using namespace pagoda;

namespace {

const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
  static const auto all = [] {
    std::vector<std::unique_ptr<Tokenizer>> out;
    for (const char* dir : {"/models/kjv-gemma4", "/tests/fixtures/byte-tokenizer"})
      out.push_back(
          std::make_unique<Tokenizer>(Tokenizer::load(PAGODA_SOURCE_DIR + std::string(dir))));
    return out;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tokenizer = *tokenizers()[data[0] % tokenizers().size()];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  const std::vector<int32_t> ids =
      tokenizer.encode(text, {.add_special_tokens = (data[0] & 0x80) != 0});
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
  }
  (void)tokenizer.decode(ids);
  // The same bytes read as ids (two bytes each), some outside the vocabulary.
  std::vector<int32_t> raw;
  for (size_t i = 1; i + 1 < size; i += 2)
    raw.push_back(static_cast<int32_t>(data[i] | (data[i + 1] << 8)));
  fuzz::expect_clean_errors([&] { (void)tokenizer.decode(raw, {.skip_special_tokens = true}); });
  return 0;
}
