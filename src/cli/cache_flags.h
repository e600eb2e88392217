// Command-line flags for the KV cache (CacheOptions), shared by the commands that plan one.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "engine/engine_options.h"

namespace pagoda {

void add_cache_flags(CLI::App& command, CacheOptions& options);

}  // namespace pagoda
