// Command-line flags for the KV cache, shared by the commands that plan one.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/cache_setup.h"

namespace pagoda {

void add_cache_flags(CLI::App& command, CacheFlags& flags);

}  // namespace pagoda
