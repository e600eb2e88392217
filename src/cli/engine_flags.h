// Flags shared by the commands that run a model (generate, serve): scheduling, prefix caching,
// how weights are loaded, and the KV cache; and loading the model they describe.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/cache_flags.h"
#include "engine/engine.h"
#include "engine/proposer.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// Where a command's model and tokenizer are: --model (default: the embedded model) and
// --tokenizer (default: the model's directory).
struct ModelFlags {
  std::string model_dir;
  std::string tokenizer_dir;
  std::string chat_template;  // --chat-template: a file, or the template itself; empty: the model's

  std::string model() const;      // Error when no --model is given and the default is missing
  std::string tokenizer() const;  // the same, for the tokenizer
  // The tokenizer, with --chat-template in place of the model's template when given.
  Tokenizer load_tokenizer() const;
};

void add_model_flags(CLI::App& command, ModelFlags& flags);
// --chat-template, for the commands that render chats.
void add_chat_template_flag(CLI::App& command, ModelFlags& flags);

struct EngineFlags {
  SchedulerConfig scheduler;
  bool no_prefix_caching = false;
  std::string device = "cpu";
  double gpu_memory_utilization = 0.9;  // share of the GPU's memory pagoda may hold
  bool enforce_eager = false;           // no CUDA graphs
  std::string load_format = "auto";
  std::string weight_dtype = "auto";
  std::string quantization = "auto";  // --quantization: auto, fp8 or none
  bool check_weights = false;         // refuse a checkpoint with NaN or infinite weights
  uint64_t seed = 0;                  // dummy weights and unseeded requests
  std::string speculative_config;     // --speculative-config: JSON, empty for none
  int64_t tensor_parallel_size = 1;
  int64_t decode_context_parallel_size = 1;
  int64_t dcp_kv_cache_interleave_size = 1;
  CacheFlags cache;
};

void add_engine_flags(CLI::App& command, EngineFlags& flags);

// --temperature, --top-k, --top-p and --min-p into `sampling`.
void add_sampling_filter_flags(CLI::App& command, SamplingParams& sampling);

// The device --device names. Error for an unknown name, a build without CUDA or a missing GPU.
Device engine_device(const EngineFlags& flags);

// The KV cache the flags ask for, with the scheduler's token budget, resolved for --device and
// `target` (resolve_cache_config). Error for a flag that does not parse or does not fit.
CacheConfig engine_cache_config(const EngineFlags& flags, const ModelConfig& target);

// A run's model as every rank holds it, rank 0 first (one rank without --tensor-parallel-size or
// --decode-context-parallel-size): the shards, their communicators, and their KV caches, all
// allocated from one plan.
struct RankModels {
  std::vector<std::unique_ptr<Communicator>> communicators;  // with more than one rank
  // Each rank's in its DCP group, when DCP groups are smaller than the group of all ranks.
  std::vector<std::unique_ptr<Communicator>> context_communicators;
  std::vector<Device> devices;  // each rank's
  std::vector<std::unique_ptr<CausalLm>> models;
  std::vector<std::unique_ptr<Drafter>> drafters;  // with --speculative-config
  std::vector<KvCache> caches;

  CausalLm& model() const { return *models[0]; }
  Drafter* drafter() const { return drafters.empty() ? nullptr : drafters[0].get(); }
  const KvCache& cache() const { return caches[0]; }
  // Allocates every rank's cache from `plan` on its device.
  void allocate_caches(const KvCachePlan& plan);
  // `config` with the ranks after the first, for the engine to run beside its own.
  EngineConfig with_ranks(EngineConfig config) const;
};

struct EngineModels;
// Every rank's shard of the model and of the drafter as the flags say (their checkpoints, or dummy
// weights); the caches are left to allocate_caches(). Error for a device that cannot run it or a
// bad checkpoint.
RankModels load_model(const EngineModels& models, const EngineFlags& flags);
EngineConfig engine_config(const ModelConfig& config, const KvCachePlan& plan,
                           const EngineFlags& flags);

// A run's model as the flags describe it before any weight loads: the target's config and, with
// --speculative-config, the drafter's (checked against the target and the device).
struct EngineModels {
  std::string model_dir;
  ModelConfig target;
  // The target as each rank holds it (its share of the heads): what the KV cache is planned from.
  // The target itself with one rank.
  ModelConfig planned;
  int64_t tensor_parallel_size = 1;
  int64_t decode_context_parallel_size = 1;
  // Ranks the run holds (world_size of the two).
  int64_t ranks() const { return world_size(tensor_parallel_size, decode_context_parallel_size); }
  std::optional<SpeculativeConfig> speculative;
  // The drafter as each rank holds it, for the KV plan.
  std::optional<ModelConfig> planned_drafter;

  const ModelConfig* drafter() const { return planned_drafter ? &*planned_drafter : nullptr; }
};
// Error for a config, a --speculative-config, or a --tensor-parallel-size or
// --decode-context-parallel-size that cannot run (before any weight loads).
EngineModels engine_models(const std::string& model_dir, const EngineFlags& flags);
// Speculative decoding's counters as --stats prints them: rounds, drafts proposed and accepted,
// and the share of rounds that kept each position.
std::string describe_spec_stats(const GenerationStats& stats);

}  // namespace pagoda
