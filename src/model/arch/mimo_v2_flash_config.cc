// MiMo-V2-Flash: K head 192 and V head 128 (split pages); sliding layers with their own head
// counts. Both spellings are read: the published one (hybrid_layer_pattern with 1 = sliding,
// swa_* fields, sliding_window_size) and transformers' (layer_types; sliding layers then have
// twice the KV heads of full layers).
#include <fmt/format.h>

#include "model/arch/arch_configs.h"

namespace pagoda {

void read_mimo_v2_flash_layers(const ConfigReader& text, ModelConfig& model) {
  const int64_t num_layers = read_num_layers(text);
  std::vector<AttentionKind> kinds(num_layers, AttentionKind::kFull);
  if (auto pattern = text.optional_integer_list("hybrid_layer_pattern")) {
    if (static_cast<int64_t>(pattern->size()) != num_layers) {
      text.fail_field("hybrid_layer_pattern", fmt::format("has {} entries; num_hidden_layers is {}",
                                                          pattern->size(), num_layers));
    }
    for (int64_t i = 0; i < num_layers; ++i) {
      if ((*pattern)[i] != 0 && (*pattern)[i] != 1) {
        text.fail_field("hybrid_layer_pattern",
                        fmt::format("has entry {} at layer {}; expected 0 (full) or 1 (sliding)",
                                    (*pattern)[i], i));
      }
      kinds[i] = (*pattern)[i] == 1 ? AttentionKind::kSliding : AttentionKind::kFull;
    }
  } else if (text.has("layer_types")) {
    kinds = parse_layer_types(text, num_layers);
  }

  const HeadCounts full = read_head_counts(text, "num_attention_heads", "num_key_value_heads");
  const int64_t head_k = text.positive("head_dim");
  const int64_t head_v = text.positive_or("v_head_dim", head_k);
  HeadCounts sliding = full;
  sliding.num_q_heads = text.positive_or("swa_num_attention_heads", full.num_q_heads);
  sliding.num_kv_heads = text.positive_or("swa_num_key_value_heads", 2 * full.num_kv_heads);
  if (sliding.num_q_heads % sliding.num_kv_heads != 0) {
    text.fail_field("swa_num_attention_heads",
                    fmt::format("is {}, not a multiple of {} sliding KV heads", sliding.num_q_heads,
                                sliding.num_kv_heads));
  }
  const int64_t sliding_head_k = text.positive_or("swa_head_dim", head_k);
  const int64_t sliding_head_v = text.positive_or("swa_v_head_dim", head_v);
  int64_t window = 0;
  if (std::find(kinds.begin(), kinds.end(), AttentionKind::kSliding) != kinds.end()) {
    window = text.has("sliding_window_size") ? text.positive("sliding_window_size")
                                             : text.positive("sliding_window");
  }

  for (int64_t i = 0; i < num_layers; ++i) {
    const bool is_sliding = kinds[i] == AttentionKind::kSliding;
    const HeadCounts& heads = is_sliding ? sliding : full;
    model.layers.push_back({.name = attention_layer_name(i),
                            .kind = kinds[i],
                            .sliding_window = is_sliding ? window : 0,
                            .num_q_heads = heads.num_q_heads,
                            .num_kv_heads = heads.num_kv_heads,
                            .head_size_k = is_sliding ? sliding_head_k : head_k,
                            .head_size_v = is_sliding ? sliding_head_v : head_v});
  }
}

}  // namespace pagoda
