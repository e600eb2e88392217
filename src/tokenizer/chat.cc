#include "tokenizer/chat.h"

#include "core/error.h"
#include "core/files.h"

namespace pagoda {
namespace {

JinjaTemplate parse_chat_template(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) {
    fail(
        "the tokenizer has no chat template (tokenizer_config.json's chat_template, "
        "chat_template.jinja or chat_template.json)");
  }
  try {
    return JinjaTemplate::parse(tokenizer.chat_template());
  } catch (const Error& error) {
    fail("chat template: {}", error.what());
  }
}

}  // namespace

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer)
    : tokenizer_(tokenizer), template_(parse_chat_template(tokenizer)) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const ChatOptions& options) const {
  if (!messages.is_array()) fail("chat messages must be a list, not {}", messages.type_name());
  for (const auto& message : messages) {
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      fail("chat message {} has no role", json_excerpt(message));
    }
  }
  nlohmann::ordered_json context =
      options.extra_context.is_object() ? options.extra_context : nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = options.add_generation_prompt;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const nlohmann::json& value = tokenizer_.config().value(key, nlohmann::json());
    if (value.is_string()) context[key] = value.get<std::string>();
    if (value.is_object() && value.contains("content")) context[key] = value["content"];
  }
  if (!options.tools.is_null()) context["tools"] = options.tools;
  try {
    return template_.render(context);
  } catch (const Error& error) {
    fail("chat template: {}", error.what());
  }
}

std::vector<int32_t> ChatTemplate::encode(const nlohmann::ordered_json& messages,
                                          const ChatOptions& options) const {
  return tokenizer_.encode(render(messages, options), {.add_special_tokens = false});
}

}  // namespace pagoda
