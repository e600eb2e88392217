// Prompts as the command line and prompts files give them — token ids, text or chat messages —
// with their sampling parameters, and how they become token ids.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct PromptSpec {
  std::vector<int32_t> ids;                        // given as token ids
  std::optional<std::string> text;                 // given as text
  std::optional<nlohmann::ordered_json> messages;  // given as chat messages
  SamplingParams params;
};

// "1,2,3" → ids; Error naming the item that is not a token id.
std::vector<int32_t> parse_id_list(const std::string& text);
// A JSONL prompts file. Each line: a list of token ids, or an object with one of
// "prompt_token_ids", "prompt" (text) or "messages" (chat) and any sampling fields, which
// override `defaults`. Error naming the file, the line and the problem.
std::vector<PromptSpec> read_prompts_file(const std::string& path, const SamplingParams& defaults);
// Chat messages from a JSON file: a list of {role, content} objects.
nlohmann::ordered_json read_messages_file(const std::string& path);

// The prompt's token ids. Text is encoded with the tokenizer's special tokens; messages go
// through the chat template. Error when the prompt needs a tokenizer or template that is absent.
std::vector<int32_t> resolve_prompt(const PromptSpec& prompt, const Tokenizer* tokenizer,
                                    const ChatTemplate* chat);

}  // namespace pagoda
