// What pagoda reads from a Hugging Face config.json: the architecture and, per layer, the shape of
// its attention and where its KV comes from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace pagoda {

enum class AttentionKind { kFull, kSliding };

std::string_view attention_kind_name(AttentionKind kind);  // "full", "sliding"

// Where a layer's KV lives.
enum class KvSource {
  kOwn,               // the layer computes K/V and owns its cache
  kEarlierLayer,      // it reads the cache of `kv_source_layer` of the same model
  kTargetLastOfKind,  // a drafter layer that reads the target's last non-shared layer of its kind
};

struct LayerAttentionConfig {
  std::string name;  // "model.layers.3.self_attn"
  AttentionKind kind = AttentionKind::kFull;
  int64_t sliding_window = 0;  // tokens; sliding layers only
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_size_k = 0;
  int64_t head_size_v = 0;
  KvSource kv_source = KvSource::kOwn;
  int64_t kv_source_layer = -1;  // index into ModelConfig::layers when kEarlierLayer
};

// How a model's projection weights are quantized: as the checkpoint stores them
// (config.json's quantization_config), or at load (--quantization). Only FP8 e4m3 exists: weights
// with one f32 scale per block of block_rows × block_cols (128 × 128 in DeepSeek's and MiMo's
// checkpoints), or per tensor. Activations stay bf16 (f32 on the CPU): the scales apply to the
// weights alone, as a dequantization.
struct QuantizationConfig {
  bool fp8 = false;
  bool stored = false;  // the checkpoint holds the FP8 values and scales; else quantized at load
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  bool per_tensor = false;           // one scale per weight (weight_scale); no blocks
  std::vector<std::string> ignored;  // modules left unquantized (modules_to_not_convert)
  // activation_scheme "static": the checkpoint's input_scale tensors go unread, as activations are
  // scaled per token group of 128 as they come (the dynamic scheme), which WeightSource warns of.
  bool static_activations = false;

  // Whether the module `name` ("model.layers.0.mlp.down_proj") is quantized at load: not when an
  // ignored entry names it or one of its enclosing modules, or is a suffix of its dotted name.
  bool quantizes(const std::string& name) const;
};

// Reads config.json's "quantization_config" (absent: none). Error naming the field for a scheme
// pagoda does not run: a quant_method other than "fp8", an fmt other than "e4m3", or block sizes
// that are not two positive integers.
QuantizationConfig parse_quantization(const nlohmann::json& config, const std::string& source);
// The config --quantization asks for: "auto" or "" (the checkpoint's), "fp8" (the checkpoint's
// when it is FP8, else 128 × 128 blocks quantized at load), "none" (Error for an FP8 checkpoint).
QuantizationConfig resolve_quantization(const QuantizationConfig& checkpoint,
                                        const std::string& flag);

// The sampling defaults a checkpoint's generation_config.json gives, as vLLM reads them: each one
// present stands in for the engine's default where a request leaves that field out.
struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;  // max_tokens

  bool empty() const {
    return !temperature && !top_k && !top_p && !min_p && !repetition_penalty && !max_new_tokens;
  }
};

struct ModelConfig {
  std::string source;          // the file it came from
  std::string architecture;    // "Gemma4ForCausalLM"
  std::string model_type;      // the checkpoint's own: "gemma4", "gemma4_assistant", "llama"
  std::optional<DType> dtype;  // the checkpoint's dtype when the config states one
  int64_t max_position_embeddings = 0;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  std::vector<LayerAttentionConfig> layers;
  // eos_token_id, an id or a list, of config.json and generation_config.json (both, in that order,
  // each id once): a chat model's end of turn is often in the second only.
  std::vector<int64_t> eos_token_ids;
  GenerationDefaults generation;  // from generation_config.json
  nlohmann::json text_config;     // the text model's fields, for the architecture's code
  nlohmann::json file_config;     // the whole config.json, for fields outside text_config
  QuantizationConfig quantization;

  // True when some layer reads a target model's cache: the model only runs as a drafter.
  bool needs_target() const;
};

// Reads `model_dir`/config.json, and generation_config.json where there is one. Throws Error naming
// the file and what is wrong with it.
ModelConfig load_model_config(const std::string& model_dir);
// Adds an already-read generation_config.json (`source` names it in errors) to `model`: its EOS
// ids and sampling defaults. Error for a field of the wrong type or out of range.
void read_generation_config(const nlohmann::json& config, const std::string& source,
                            ModelConfig& model);
// Parses an already-read config; `source` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& source);

// The architectures this build understands, as written in config.json's "architectures".
std::vector<std::string> supported_architectures();

}  // namespace pagoda
