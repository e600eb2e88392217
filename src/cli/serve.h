// `pagoda serve`: the OpenAI-compatible HTTP server.
#pragma once

#include <CLI/CLI.hpp>

namespace pagoda {

void add_serve_command(CLI::App& app);

}  // namespace pagoda
