// `pagoda generate`: runs prompts (token ids for now) through a model and prints the tokens.
#pragma once

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

void add_generate_command(CLI::App& app);

}  // namespace pagoda
