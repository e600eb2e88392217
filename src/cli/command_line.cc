#include "cli/command_line.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/bench.h"
#include "cli/generate.h"
#include "cli/inspect.h"
#include "cli/serve.h"
#include "cli/tokenize.h"
#include "core/error.h"

namespace pagoda {

int run_command_line(int argc, char** argv) {
  CLI::App app{"pagoda: an LLM inference engine with a heterogeneous paged KV cache", "pagoda"};
  app.require_subcommand(1);
  add_generate_command(app);
  add_inspect_command(app);
  add_tokenize_command(app);
  add_serve_command(app);
  add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const Error& error) {
    fmt::print(stderr, "error: {}\n", error.what());
    return 1;
  } catch (const InternalError& error) {
    fmt::print(stderr, "{}\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    // Whatever escaped the checks above is still a message and an exit status, never an abort.
    fmt::print(stderr, "internal error: {}\n", error.what());
    return 2;
  }
  return 0;
}

}  // namespace pagoda
