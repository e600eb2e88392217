#include "cli/prompts.h"

#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/files.h"

namespace pagoda {

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 0 || value > INT32_MAX) {
      fail("--prompt-ids '{}': '{}' is not a token id", text, item);
    }
    ids.push_back(static_cast<int32_t>(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

namespace {

std::vector<int32_t> read_ids(const nlohmann::ordered_json& value, const std::string& where) {
  if (!value.is_array()) fail("{}: expected a list of token ids", where);
  std::vector<int32_t> ids;
  for (const auto& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      fail("{}: {} is not a token id", where, id.dump());
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

}  // namespace

std::vector<PromptSpec> read_prompts_file(const std::string& path, const SamplingParams& defaults) {
  // Read whole, as every other file is: a regular file of bounded size (a device such as /dev/zero
  // is refused rather than read without end), and a read error is an error, not the end.
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const Error& error) {
    fail("cannot read prompts file '{}': {}", path, error.what());
  }
  std::vector<PromptSpec> requests;
  std::istringstream lines(std::move(text));
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const auto value = parse_json_text<nlohmann::ordered_json>(line, where);
    if (!value.is_object()) {
      requests.push_back({.ids = read_ids(value, where), .params = defaults});
      continue;
    }
    constexpr std::string_view kPromptFields[] = {"prompt_token_ids", "prompt", "messages"};
    PromptSpec prompt;
    try {
      prompt.params = read_sampling_params(value, defaults, kPromptFields);
    } catch (const Error& error) {
      fail("{}: {}", where, error.what());
    }
    const int kinds = static_cast<int>(value.contains("prompt_token_ids")) +
                      static_cast<int>(value.contains("prompt")) +
                      static_cast<int>(value.contains("messages"));
    if (kinds != 1) fail("{}: give exactly one of prompt_token_ids, prompt and messages", where);
    if (value.contains("prompt_token_ids")) prompt.ids = read_ids(value["prompt_token_ids"], where);
    if (value.contains("prompt")) {
      if (!value["prompt"].is_string()) fail("{}: 'prompt' must be a string", where);
      prompt.text = value["prompt"].get<std::string>();
    }
    if (value.contains("messages")) prompt.messages = value["messages"];
    requests.push_back(std::move(prompt));
  }
  return requests;
}

nlohmann::ordered_json read_messages_file(const std::string& path) {
  return parse_json_text<nlohmann::ordered_json>(read_text_file(path), path);
}

std::vector<int32_t> resolve_prompt(const PromptSpec& prompt, const Tokenizer* tokenizer,
                                    const ChatTemplate* chat) {
  if (prompt.messages) {
    if (chat == nullptr) fail("chat messages need a tokenizer with a chat template");
    return chat->encode(*prompt.messages);
  }
  if (prompt.text) {
    if (tokenizer == nullptr) fail("a text prompt needs a tokenizer (tokenizer.json)");
    return tokenizer->encode(*prompt.text);
  }
  return prompt.ids;
}

}  // namespace pagoda
