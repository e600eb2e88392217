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

struct ModelConfig {
  std::string source;          // the file it came from
  std::string architecture;    // "Gemma4ForCausalLM"
  std::string model_type;      // the checkpoint's own: "gemma4", "gemma4_assistant", "llama"
  std::optional<DType> dtype;  // the checkpoint's dtype when the config states one
  int64_t max_position_embeddings = 0;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  std::vector<LayerAttentionConfig> layers;
  std::vector<int64_t> eos_token_ids;  // eos_token_id, an id or a list
  nlohmann::json text_config;          // the text model's fields, for the architecture's code
  nlohmann::json file_config;          // the whole config.json, for fields outside text_config

  // True when some layer reads a target model's cache: the model only runs as a drafter.
  bool needs_target() const;
};

// Reads `model_dir`/config.json. Throws Error naming the file and what is wrong with it.
ModelConfig load_model_config(const std::string& model_dir);
// Parses an already-read config; `source` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& source);

// The architectures this build understands, as written in config.json's "architectures".
std::vector<std::string> supported_architectures();

}  // namespace pagoda
