// Per-architecture readers of config.json attention fields. Each fills ModelConfig::layers (and
// anything architecture-specific) from the text model's config object.
#pragma once

#include "model/config_reader.h"
#include "model/model_config.h"

namespace pagoda {

void read_llama_layers(const ConfigReader& text, ModelConfig& model);
void read_qwen3_layers(const ConfigReader& text, ModelConfig& model);
void read_gemma4_layers(const ConfigReader& text, ModelConfig& model);
void read_gemma4_assistant_layers(const ConfigReader& text, ModelConfig& model);
void read_mimo_v2_flash_layers(const ConfigReader& text, ModelConfig& model);
// MiMo's layers whose MLP is a mixture of experts: "sparse" in mlp_layer_types, or nonzero in
// moe_layer_freq (all dense without either). Error for a list without one entry per layer.
std::vector<bool> read_mimo_sparse_layers(const ConfigReader& text, int64_t num_layers);

// Helpers shared by the readers.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeadsOrHeadSize = 65536;
int64_t read_num_layers(const ConfigReader& text);  // num_hidden_layers in [1, kMaxLayers]
std::string attention_layer_name(int64_t index);    // "model.layers.<index>.self_attn"
// Parses "full_attention" / "sliding_attention" entries of `layer_types`.
std::vector<AttentionKind> parse_layer_types(const ConfigReader& text, int64_t num_layers);
// num_attention_heads / num_key_value_heads with GQA divisibility checked.
struct HeadCounts {
  int64_t num_q_heads;
  int64_t num_kv_heads;
};
HeadCounts read_head_counts(const ConfigReader& text, const std::string& q_key,
                            const std::string& kv_key);

}  // namespace pagoda
