// Chat prompts: a model's chat template (Jinja) applied to a list of messages.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja/jinja.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the assistant's turn header
  nlohmann::ordered_json tools;       // null: none
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();  // e.g. enable_thinking
};

class ChatTemplate {
 public:
  // Parses the tokenizer's chat template; Error when it has none or it does not parse.
  explicit ChatTemplate(const Tokenizer& tokenizer);

  // The prompt text for `messages` (a JSON array of {role, content, ...} objects). Error for
  // messages that are not such a list, or what the template raises.
  std::string render(const nlohmann::ordered_json& messages, const ChatOptions& options = {}) const;
  // The rendered prompt's token ids (no special tokens added: the template writes them).
  std::vector<int32_t> encode(const nlohmann::ordered_json& messages,
                              const ChatOptions& options = {}) const;

 private:
  const Tokenizer& tokenizer_;
  JinjaTemplate template_;
};

}  // namespace pagoda
