// The Jinja lexer, parser and renderer: a template and a messages list from the same input
// (split at the first NUL byte), rendered as a chat template is.
#include <nlohmann/json.hpp>

#include "core/files.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/jinja/jinja.h"

using namespace pagoda;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const size_t split = input.find('\0');
  const std::string_view source = input.substr(0, split);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  if (split != std::string_view::npos) {
    fuzz::expect_clean_errors([&] {
      messages = parse_json_text<nlohmann::ordered_json>(input.substr(split + 1), "messages");
    });
  }
  fuzz::expect_clean_errors([&] {
    const JinjaTemplate parsed = JinjaTemplate::parse(source);
    (void)parsed.render({{"messages", messages},
                         {"add_generation_prompt", true},
                         {"bos_token", "<s>"},
                         {"eos_token", "</s>"}});
  });
  return 0;
}
