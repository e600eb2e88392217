// `pagoda serve`: the OpenAI-compatible HTTP server.
#pragma once

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

void add_serve_command(CLI::App& app);

}  // namespace pagoda
