// The pagoda command line: its subcommands, the parse, and the exit status of every error.
#pragma once

namespace pagoda {

// Runs the command named by argv; returns the process's exit status (0, 1 for a user error, 2 for
// an internal one; CLI11's own for a bad command line or --help).
int run_command_line(int argc, char** argv);

}  // namespace pagoda
