// The OpenAI request parsers, for completions, chat, /tokenize and /detokenize (the first byte
// picks), with the embedded model's tokenizer and a chat template.
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "fuzz/fuzz_util.h"
#include "server/openai_request.h"

using namespace pagoda;

namespace {

struct Served {
  Tokenizer tokenizer = Tokenizer::load(PAGODA_SOURCE_DIR + std::string("/models/kjv-gemma4"));
  std::unique_ptr<ChatTemplate> chat;
  RequestLimits limits{.served_model_name = "kjv-gemma4", .max_model_len = 2048};
  Served() {
    if (tokenizer.chat_template().empty()) {
      tokenizer.set_chat_template(
          "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}");
    }
    chat = std::make_unique<ChatTemplate>(tokenizer);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Served served;
  if (size == 0) return 0;
  const int route = data[0] % 4;
  const std::string body(fuzz::as_text(data + 1, size - 1));
  fuzz::expect_clean_errors([&] {
    const auto json = parse_json_text<nlohmann::ordered_json>(body, "the body");
    if (route == 2) {
      (void)parse_tokenize_request(json, served.tokenizer, served.chat.get());
      return;
    }
    if (route == 3) {
      (void)served.tokenizer.decode(parse_detokenize_request(json, served.tokenizer));
      return;
    }
    const Endpoint endpoint = route == 1 ? Endpoint::kChatCompletions : Endpoint::kCompletions;
    const OpenAiRequest request =
        parse_openai_request(json, endpoint, served.tokenizer, served.chat.get(), served.limits);
    for (const auto& prompt : request.prompts) {
      if (static_cast<int64_t>(prompt.size()) > served.limits.max_model_len) __builtin_trap();
    }
  });
  return 0;
}
