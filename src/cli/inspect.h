// `pagoda inspect`: plans the KV cache of a model (and drafter) from config.json alone.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "cli/cache_flags.h"
#include "engine/speculative_config.h"
#include "kv/kv_cache_plan.h"
#include "model/model_config.h"

namespace CLI {
class App;  // CLI11
}  // namespace CLI

namespace pagoda {

struct InspectOptions {
  std::string model_dir;
  std::string draft_model_dir;     // --draft-model, the short form; empty: no drafter
  std::string speculative_config;  // --speculative-config JSON; empty: none
  CacheOptions cache;
  int64_t max_num_batched_tokens = kDefaultMaxNumBatchedTokens;
  int64_t tensor_parallel_size = 1;
  int64_t decode_context_parallel_size = 1;
  int64_t dcp_kv_cache_interleave_size = 1;
  bool json = false;
};

struct InspectReport {
  ModelConfig target;
  std::optional<ModelConfig> drafter;
  std::optional<SpeculativeConfig> speculative;  // from --speculative-config
  DType dtype = DType::kBF16;
  std::string attention_backend;
  // Tensor parallelism: the ranks, and each rank's weights. The plan is one rank's (each holds its
  // share of the KV heads and, under decode context parallelism, of every sequence's tokens).
  int64_t tensor_parallel_size = 1;
  int64_t decode_context_parallel_size = 1;
  int64_t rank_params = 0;        // parameters one rank holds
  int64_t rank_weight_bytes = 0;  // at the checkpoint's dtype (bf16 when it states none) and FP8
  KvCachePlan plan;
  // With a KV dtype other than bfloat16: the tokens per GiB the same plan holds in bfloat16, for
  // the gain.
  std::optional<int64_t> bf16_tokens_per_gib;
};

// Reads the configs and plans the cache. Throws Error on bad input.
InspectReport build_inspect_report(const InspectOptions& options);
// The report as a JSON object; docs/inspect-json.md documents its fields.
nlohmann::json inspect_report_json(const InspectReport& report);
// The report as tables for a terminal.
std::string inspect_report_text(const InspectReport& report);

// Adds the `inspect` subcommand to `app`; its callback prints to stdout.
void add_inspect_command(CLI::App& app);

}  // namespace pagoda
