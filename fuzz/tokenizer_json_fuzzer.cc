// tokenizer.json itself: building a tokenizer from any JSON, then encoding and decoding a sample.
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

using namespace pagoda;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  fuzz::expect_clean_errors([&] {
    const Tokenizer tokenizer(parse_json_text(text, "tokenizer.json"), nlohmann::json::object());
    const std::vector<int32_t> ids = tokenizer.encode("Hello, wörld! 123 \xF0\x9F\x98\x80 <s>");
    (void)tokenizer.decode(ids);
  });
  return 0;
}
