// `pagoda tokenize`: shows how a model's tokenizer splits a text (or decodes ids), for debugging
// prompts.
#pragma once

#include <CLI/CLI.hpp>

namespace pagoda {

void add_tokenize_command(CLI::App& app);

}  // namespace pagoda
