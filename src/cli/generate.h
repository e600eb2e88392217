// `pagoda generate`: runs prompts (token ids for now) through a model and prints the tokens.
#pragma once

#include <CLI/CLI.hpp>

namespace pagoda {

void add_generate_command(CLI::App& app);

}  // namespace pagoda
