#include "cli/tokenize.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include "cli/engine_flags.h"
#include "cli/prompts.h"
#include "core/error.h"
#include "core/files.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

struct TokenizeOptions {
  ModelPaths paths;
  std::string text;
  std::string ids;  // "1,2,3": decode instead
  bool chat = false;
  bool no_special_tokens = false;
  bool json = false;
};

void run_tokenize(const TokenizeOptions& options) {
  const Tokenizer tokenizer = options.paths.load_tokenizer();
  if (!options.ids.empty()) {
    const std::vector<int32_t> ids = parse_id_list(options.ids);
    // Ids named by hand are checked, as /detokenize checks them (decoding passes over a model's
    // padded rows).
    for (const int32_t id : ids)
      (void)tokenizer.id_to_token(id);
    const std::string text = tokenizer.decode(ids);
    if (options.json) {
      fmt::print("{}\n", json_dump(nlohmann::json({{"ids", ids}, {"text", text}})));
    } else {
      fmt::print("{}\n", text);
    }
    return;
  }
  std::vector<int32_t> ids;
  std::string text = options.text;
  if (options.chat) {
    const ChatTemplate chat(tokenizer);
    text = chat.render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}}));
    ids = tokenizer.encode(text, {.add_special_tokens = false});
  } else {
    ids = tokenizer.encode(text, {.add_special_tokens = !options.no_special_tokens});
  }
  std::vector<std::string> tokens;
  for (const int32_t id : ids)
    tokens.push_back(tokenizer.id_to_token(id));
  if (options.json) {
    fmt::print("{}\n",
               json_dump(nlohmann::json({{"ids", ids}, {"tokens", tokens}, {"text", text}})));
    return;
  }
  fmt::print("{} tokens\n", ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    // The token string as JSON shows it, so spaces and control characters are visible.
    fmt::print("{:>8}  {}{}\n", ids[i], json_dump(nlohmann::json(tokens[i])),
               tokenizer.is_special(ids[i]) ? "  (special)" : "");
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command =
      app.add_subcommand("tokenize", "Show the token ids and pieces of a text (or decode ids)");
  add_model_flags(*command, options->paths);
  add_chat_template_flag(*command, options->paths);
  command->add_option("text", options->text, "The text to tokenize");
  command->add_option("--ids", options->ids, "Decode these comma-separated ids instead");
  command->add_flag("--chat", options->chat,
                    "Tokenize the text as a user message rendered with the chat template");
  command->add_flag("--no-special-tokens", options->no_special_tokens,
                    "Do not add the tokenizer's special tokens (e.g. BOS)");
  command->add_flag("--json", options->json, "One JSON object: ids, tokens and text");
  command->callback([options] { run_tokenize(*options); });
}

}  // namespace pagoda
