// Flags shared by the commands that run a model (generate, serve, bench): where the model is,
// scheduling, prefix caching, how weights are loaded, parallelism and the KV cache, into their
// typed form (EngineOptions).
#pragma once

#include <string>

#include "cli/cache_flags.h"
#include "engine/engine_options.h"

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

// --model and --tokenizer.
void add_model_flags(CLI::App& command, ModelPaths& paths);
// --chat-template, for the commands that render chats.
void add_chat_template_flag(CLI::App& command, ModelPaths& paths);

void add_engine_flags(CLI::App& command, EngineOptions& options);

// A check for an unsigned flag (a seed): the error for a negative number, which CLI11 would read
// as 2^64 minus it; else "".
std::string refuse_negative(const std::string& text);

// --temperature, --top-k, --top-p and --min-p into `sampling`.
void add_sampling_filter_flags(CLI::App& command, SamplingParams& sampling);

// Speculative decoding's counters as --stats prints them: rounds, drafts proposed and accepted,
// and the share of rounds that kept each position.
std::string describe_spec_stats(const GenerationStats& stats);

}  // namespace pagoda
