// `pagoda bench`: the latency and throughput of one fixed batch (B prompts of I random tokens, O
// generated tokens each) through the engine, as vLLM's benchmark_latency measures them.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

#include "model/model_config.h"

namespace pagoda {

// Parameter counts of a dense decoder (Llama, Qwen3, Gemma 4 without MoE) from its config alone:
// embeddings, attention projections, gated MLPs, hidden-size norms, Gemma 4's per-layer inputs
// and an untied lm_head. Per-head q/k norms, scalars and MoE experts are not counted.
struct DenseWeightEstimate {
  int64_t params = 0;           // every weight as loaded
  int64_t streamed_params = 0;  // weights every decode step reads whole: all but embedding lookups
};

DenseWeightEstimate estimate_dense_decoder_weights(const ModelConfig& config);

void add_bench_command(CLI::App& app);

}  // namespace pagoda
