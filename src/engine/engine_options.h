// The typed form of the options that run a model, as the CLI's flags, the server and the library
// facade give them: where the model is, how its weights load, scheduling, parallelism and the KV
// cache; and loading every rank's model and cache from them. Option names follow the CLI's flags
// (and vLLM's), so errors name the flag.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cache_config.h"
#include "engine/engine.h"
#include "engine/proposer.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// `model_dir`, or when empty the embedded default model (models/kjv-gemma4 of the source tree, or
// where the package installed it); Error when that is missing.
std::string model_dir_or_default(const std::string& model_dir);

// Where a run's model and tokenizer are: --model (default: the embedded model) and --tokenizer
// (default: the model's directory), and --chat-template.
struct ModelPaths {
  std::string model_dir;
  std::string tokenizer_dir;
  std::string chat_template;  // --chat-template: a file, or the template itself; empty: the model's

  std::string model() const;      // Error when no --model is given and the default is missing
  std::string tokenizer() const;  // the same, for the tokenizer
  // The tokenizer, with --chat-template in place of the model's template when given.
  Tokenizer load_tokenizer() const;
};

// The KV cache options, strings as the flags give them.
struct CacheOptions {
  std::string kv_cache_memory;  // e.g. "4GiB"; empty: not given
  std::optional<int64_t> num_blocks;
  int64_t block_size = 16;
  std::optional<int64_t> max_model_len;
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";  // vLLM's spelling of the same choice, with fp8
  // Target layers kept in the model's dtype beside an fp8 cache: "sliding_window", layer indices.
  std::vector<std::string> kv_cache_dtype_skip_layers;
  std::string attention_backend = "auto";
  std::string buffer_layout = "separate";
};

// The options as a CacheConfig, "auto" left unresolved. Throws Error for a value that does not
// parse (unknown dtype, backend or layout, a size that is not one).
CacheConfig parse_cache_options(const CacheOptions& options);

struct EngineOptions {
  ModelPaths paths;
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
  // --generation-config: where requests' sampling defaults come from: auto (the model's
  // generation_config.json), vllm (the engine's own), or a directory holding one.
  std::string generation_config = "auto";
  int64_t tensor_parallel_size = 1;
  int64_t decode_context_parallel_size = 1;
  int64_t dcp_kv_cache_interleave_size = 1;
  CacheOptions cache;
};

// The device --device names. Error for an unknown name, a build without CUDA or a missing GPU.
Device engine_device(const EngineOptions& flags);

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
RankModels load_model(const EngineModels& models, const EngineOptions& flags);
EngineConfig engine_config(const ModelConfig& config, const KvCachePlan& plan,
                           const EngineOptions& flags);

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
// The sampling defaults --generation-config gives `target`'s requests (`flag`: auto, vllm or a
// directory). Error for a directory without a valid generation_config.json.
GenerationDefaults generation_defaults(const ModelConfig& target, const std::string& flag);
// Error for a config, a --speculative-config, or a --tensor-parallel-size or
// --decode-context-parallel-size that cannot run (before any weight loads).
EngineModels engine_models(const std::string& model_dir, const EngineOptions& flags);

// The KV cache the flags ask for, with the scheduler's token budget and the drafter's KV dtype,
// resolved for --device and the target as each rank holds it (resolve_cache_config). Error for a
// flag that does not parse or does not fit.
CacheConfig engine_cache_config(const EngineOptions& flags, const EngineModels& models);
}  // namespace pagoda
