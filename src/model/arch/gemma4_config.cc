// Gemma 4 text and its assistant drafter.
//
// Layer kinds come from layer_types (default: every sixth layer full, and the last layer full).
// Full layers use global_head_dim (default 512) and, with attention_k_eq_v, V taken from the K
// projection and num_global_key_value_heads KV heads. Newer configs state the per-layer overrides
// in per_layer_config instead ({"04": {"head_dim": 512}, ...}), which then wins.
// The last num_kv_shared_layers layers own no KV: each reads the last non-shared layer of its kind.
// Every assistant layer reads the target's last non-shared layer of its kind.
#include <fmt/format.h>

#include <charconv>

#include "core/error.h"
#include "model/arch/arch_configs.h"

namespace pagoda {
namespace {

std::vector<AttentionKind> gemma4_layer_kinds(const ConfigReader& text, int64_t num_layers) {
  if (text.has("layer_types")) return parse_layer_types(text, num_layers);
  std::vector<AttentionKind> kinds(num_layers, AttentionKind::kSliding);
  for (int64_t i = 0; i < num_layers; ++i) {
    if ((i + 1) % 6 == 0 || i == num_layers - 1) kinds[i] = AttentionKind::kFull;
  }
  return kinds;
}

// Per-layer heads and head size before any per_layer_config override.
std::vector<LayerAttentionConfig> gemma4_attention_shapes(const ConfigReader& text,
                                                          int64_t num_layers) {
  const std::vector<AttentionKind> kinds = gemma4_layer_kinds(text, num_layers);
  const HeadCounts heads = read_head_counts(text, "num_attention_heads", "num_key_value_heads");
  const int64_t head_size = text.positive_or("head_dim", 256);
  const bool has_per_layer_config = text.has("per_layer_config");
  const int64_t global_head_size =
      has_per_layer_config ? head_size : text.positive_or("global_head_dim", 512);
  const bool k_eq_v = text.boolean_or("attention_k_eq_v", false);
  const int64_t global_kv_heads =
      has_per_layer_config ? heads.num_kv_heads
                           : text.positive_or("num_global_key_value_heads", heads.num_kv_heads);
  int64_t window = text.positive_or("sliding_window", 512);
  if (text.optional_string("use_bidirectional_attention") == std::optional<std::string>("all")) {
    window = window / 2 + 1;
  }

  std::vector<LayerAttentionConfig> layers;
  for (int64_t i = 0; i < num_layers; ++i) {
    const bool full = kinds[i] == AttentionKind::kFull;
    LayerAttentionConfig layer{
        .name = attention_layer_name(i),
        .kind = kinds[i],
        .sliding_window = full ? 0 : window,
        .num_q_heads = heads.num_q_heads,
        .num_kv_heads = full && k_eq_v ? global_kv_heads : heads.num_kv_heads,
        .head_size_k = full ? global_head_size : head_size};
    layer.head_size_v = layer.head_size_k;
    layers.push_back(layer);
  }
  if (has_per_layer_config) {
    const ConfigReader overrides = text.child("per_layer_config");
    for (const auto& [key, value] : overrides.raw().items()) {
      int64_t index = -1;
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), index);
      if (error != std::errc() || end != key.data() + key.size() || index < 0 ||
          index >= num_layers) {
        overrides.fail_field(
            key, fmt::format("names no layer; expected a layer index in [0, {})", num_layers));
      }
      const ConfigReader layer_override = overrides.child(key);
      LayerAttentionConfig& layer = layers[index];
      layer.head_size_k = layer_override.positive_or("head_dim", layer.head_size_k);
      layer.head_size_v = layer.head_size_k;
      layer.num_kv_heads = layer_override.positive_or("num_key_value_heads", layer.num_kv_heads);
      layer.num_q_heads = layer_override.positive_or("num_attention_heads", layer.num_q_heads);
      if (layer.num_q_heads % layer.num_kv_heads != 0) {
        overrides.fail_field(key, fmt::format("gives {} query heads over {} KV heads, which is "
                                              "not a whole number of query heads per KV head",
                                              layer.num_q_heads, layer.num_kv_heads));
      }
    }
  }
  return layers;
}

int64_t read_num_kv_shared_layers(const ConfigReader& text, int64_t num_layers) {
  const int64_t shared = text.integer_or("num_kv_shared_layers", 0);
  if (shared < 0 || shared > num_layers) {
    text.fail_field(
        "num_kv_shared_layers",
        fmt::format("is {}; it must be in [0, num_hidden_layers = {}]", shared, num_layers));
  }
  return shared;
}

}  // namespace

void read_gemma4_layers(const ConfigReader& text, ModelConfig& model) {
  const int64_t num_layers = read_num_layers(text);
  model.layers = gemma4_attention_shapes(text, num_layers);
  const int64_t shared = read_num_kv_shared_layers(text, num_layers);
  if (shared == num_layers) {
    text.fail_field("num_kv_shared_layers",
                    fmt::format("is {}, every layer: a Gemma 4 text model needs at least one "
                                "layer that owns its KV",
                                shared));
  }
  const int64_t first_shared = num_layers - shared;
  for (int64_t i = first_shared; i < num_layers; ++i) {
    LayerAttentionConfig& layer = model.layers[i];
    int64_t source = -1;
    for (int64_t j = first_shared - 1; j >= 0; --j) {
      if (model.layers[j].kind == layer.kind) {
        source = j;
        break;
      }
    }
    if (source < 0) {
      text.fail_field("num_kv_shared_layers",
                      fmt::format("makes {} ({}) KV-shared, but no earlier non-shared {} layer "
                                  "exists to read from",
                                  layer.name, attention_kind_name(layer.kind),
                                  attention_kind_name(layer.kind)));
    }
    layer.kv_source = KvSource::kEarlierLayer;
    layer.kv_source_layer = source;
  }
}

void read_gemma4_assistant_layers(const ConfigReader& text, ModelConfig& model) {
  const int64_t num_layers = read_num_layers(text);
  model.layers = gemma4_attention_shapes(text, num_layers);
  const int64_t shared = read_num_kv_shared_layers(text, num_layers);
  if (shared != 0 && shared != num_layers) {
    text.fail_field(
        "num_kv_shared_layers",
        fmt::format("is {}; a Gemma 4 assistant shares every layer ({})", shared, num_layers));
  }
  for (LayerAttentionConfig& layer : model.layers)
    layer.kv_source = KvSource::kTargetLastOfKind;
}

}  // namespace pagoda
