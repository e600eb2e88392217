// `pagoda tokenize`: shows how a model's tokenizer splits a text (or decodes ids), for debugging
// prompts.
#pragma once

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

void add_tokenize_command(CLI::App& app);

}  // namespace pagoda
