// The architectures pagoda runs, one row of one table each: the name config.json gives, how its
// config is read, how the model is built, and what its weights weigh. Adding a model touches one
// row and one folder (model/arch/).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "model/causal_lm.h"
#include "model/config_reader.h"
#include "model/model_config.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace pagoda {

// Parameter counts of a model from its config alone.
struct WeightEstimate {
  int64_t params = 0;           // every weight as loaded
  int64_t streamed_params = 0;  // weights every decode step reads whole: all but embedding lookups
  int64_t projection_params = 0;  // of those, the attention and MLP projections (FP8-quantizable)
};

struct Architecture {
  const char* name;         // as in config.json's "architectures"
  const char* model_type;   // the top-level model_type that implies it
  bool nested_text_config;  // its text fields live under "text_config"
  // Fills ModelConfig::layers (and anything architecture-specific) from the text config.
  void (*read_layers)(const ConfigReader& text, ModelConfig& model);
  // Builds the model (this rank's shard of it under tensor parallelism) with its weights; null for
  // a model that only runs as a drafter.
  std::unique_ptr<CausalLm> (*build)(const ModelConfig& config, WeightSource& weights,
                                     const TensorParallel& tp);
  WeightEstimate (*estimate_weights)(const ModelConfig& config);
};

// Every row, in the order error messages list them.
std::span<const Architecture> architectures();
// The row of `name` (as ModelConfig::architecture holds it). Throws Error listing the table when
// there is none.
const Architecture& find_architecture(std::string_view name);

// The parameters of a decoder (Llama, Qwen3, Gemma 4, MiMo) from its config alone: embeddings,
// attention projections, gated MLPs, mixture-of-experts blocks (every expert held, the top k
// streamed, and the router), hidden-size norms, Gemma 4's per-layer inputs and an untied lm_head.
// Per-head q/k norms, scalars and the routers' small vectors are not counted.
WeightEstimate estimate_decoder_weights(const ModelConfig& config);

// The weights one of `tp_size` tensor-parallel ranks holds (its shard's estimate): its heads'
// projections and its share of the MLP, with the embeddings, norms and lm_head whole. A rank's
// decode step streams its shard's streamed_params.
WeightEstimate estimate_rank_weights(const ModelConfig& config, int64_t tp_size);

// Bytes of `params` weights, `projections` of them FP8 when `quantization` says so (a byte each
// and an f32 scale per block), the rest in `dtype`.
double estimate_weight_bytes(int64_t params, int64_t projections, DType dtype,
                             const QuantizationConfig& quantization);

}  // namespace pagoda
