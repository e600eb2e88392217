// Command-line flags for the KV cache (CacheOptions), shared by the commands that plan one.
#pragma once

#include <optional>
#include <string>

#include "engine/engine_options.h"

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

void add_cache_flags(CLI::App& command, CacheOptions& options);

}  // namespace pagoda
