// Qwen3: explicit head_dim (default 128); optional sliding-window layers, either listed in
// layer_types or, with use_sliding_window, every layer from max_window_layers on.
#include <fmt/format.h>

#include "model/arch/arch_configs.h"

namespace pagoda {

void read_qwen3_layers(const ConfigReader& text, ModelConfig& model) {
  const int64_t num_layers = read_num_layers(text);
  const HeadCounts heads = read_head_counts(text, "num_attention_heads", "num_key_value_heads");
  const int64_t head_size = text.positive_or("head_dim", 128);

  std::vector<AttentionKind> kinds(num_layers, AttentionKind::kFull);
  if (text.has("layer_types")) {
    kinds = parse_layer_types(text, num_layers);
  } else if (text.boolean_or("use_sliding_window", false) && text.has("sliding_window")) {
    const int64_t first_sliding = text.integer_or("max_window_layers", 28);
    for (int64_t i = std::max<int64_t>(first_sliding, 0); i < num_layers; ++i) {
      kinds[i] = AttentionKind::kSliding;
    }
  }
  int64_t window = 0;
  if (std::find(kinds.begin(), kinds.end(), AttentionKind::kSliding) != kinds.end()) {
    window = text.positive("sliding_window");
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    model.layers.push_back({.name = attention_layer_name(i),
                            .kind = kinds[i],
                            .sliding_window = kinds[i] == AttentionKind::kSliding ? window : 0,
                            .num_q_heads = heads.num_q_heads,
                            .num_kv_heads = heads.num_kv_heads,
                            .head_size_k = head_size,
                            .head_size_v = head_size});
  }
}

}  // namespace pagoda
