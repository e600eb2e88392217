// Llama: every layer is full attention; head_dim defaults to hidden_size / num_attention_heads.
#include <fmt/format.h>

#include "model/arch/arch_configs.h"

namespace pagoda {

void read_llama_layers(const ConfigReader& text, ModelConfig& model) {
  const int64_t num_layers = read_num_layers(text);
  const HeadCounts heads = read_head_counts(text, "num_attention_heads", "num_key_value_heads");
  int64_t head_size = 0;
  if (text.has("head_dim")) {
    head_size = text.positive("head_dim");
  } else {
    if (model.hidden_size % heads.num_q_heads != 0) {
      text.fail_field("hidden_size",
                      fmt::format("is {}, not a multiple of num_attention_heads = {}, and "
                                  "head_dim is not set",
                                  model.hidden_size, heads.num_q_heads));
    }
    head_size = model.hidden_size / heads.num_q_heads;
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    model.layers.push_back({.name = attention_layer_name(i),
                            .kind = AttentionKind::kFull,
                            .num_q_heads = heads.num_q_heads,
                            .num_kv_heads = heads.num_kv_heads,
                            .head_size_k = head_size,
                            .head_size_v = head_size});
  }
}

}  // namespace pagoda
