#include "model/architectures.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "model/arch/arch_configs.h"
#include "model/arch/gemma4.h"
#include "model/arch/llama.h"
#include "model/arch/mimo_v2_flash.h"

namespace pagoda {
namespace {

constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false, read_llama_layers, build_llama, estimate_decoder_weights},
    {"Qwen3ForCausalLM", "qwen3", false, read_qwen3_layers, build_qwen3, estimate_decoder_weights},
    {"Gemma4ForCausalLM", "gemma4_text", false, read_gemma4_layers, build_gemma4,
     estimate_decoder_weights},
    {"Gemma4ForConditionalGeneration", "gemma4", true, read_gemma4_layers, build_gemma4,
     estimate_decoder_weights},
    {"Gemma4AssistantForCausalLM", "gemma4_assistant", true, read_gemma4_assistant_layers, nullptr,
     estimate_decoder_weights},
    {"MiMoV2FlashForCausalLM", "mimo_v2_flash", false, read_mimo_v2_flash_layers,
     build_mimo_v2_flash, estimate_decoder_weights},
};

}  // namespace

std::span<const Architecture> architectures() {
  return kArchitectures;
}

const Architecture& find_architecture(std::string_view name) {
  for (const Architecture& arch : kArchitectures) {
    if (name == arch.name) return arch;
  }
  fail("unsupported architecture '{}'; supported: {}", name,
       fmt::join(supported_architectures(), ", "));
}

WeightEstimate estimate_decoder_weights(const ModelConfig& config) {
  const nlohmann::json& text = config.text_config;
  // Counted in double: each size is bounded, but a hostile config's products need not fit 64 bits.
  const auto integer = [&](const char* key) {
    const auto it = text.find(key);
    return it != text.end() && it->is_number_integer() ? it->get<double>() : 0.0;
  };
  const auto flag = [&](const char* key) {
    const auto it = text.find(key);
    return it != text.end() && it->is_boolean() && it->get<bool>();
  };
  // Gemma 4 always projects logits with the embedding table; it has four norms per layer.
  const bool gemma = config.architecture.starts_with("Gemma");
  const double hidden = static_cast<double>(config.hidden_size);
  const double vocab = static_cast<double>(config.vocab_size);
  const int64_t num_layers = static_cast<int64_t>(config.layers.size());
  const double inner = integer("intermediate_size");
  const double ple = integer("hidden_size_per_layer_input");
  const auto first_shared = std::find_if(config.layers.begin(), config.layers.end(),
                                         [](auto& l) { return l.kv_source != KvSource::kOwn; }) -
                            config.layers.begin();
  // Mixture-of-experts blocks: a MiMo layer's in place of its dense MLP, a Gemma 4 layer's
  // (enable_moe_block) beside it. Every expert is held; a token streams its top k.
  std::vector<bool> moe_layer(num_layers, false);
  const bool moe_replaces_mlp = config.architecture.starts_with("MiMo");
  if (moe_replaces_mlp) {
    moe_layer = read_mimo_sparse_layers(ConfigReader(text, config.source), num_layers);
  } else if (flag("enable_moe_block")) {
    moe_layer.assign(num_layers, true);
  }
  const double experts = std::max(integer("n_routed_experts"), integer("num_experts"));
  const double top_k =
      std::min(experts, std::max(integer("num_experts_per_tok"), integer("top_k_experts")));
  const double expert = 3 * hidden * integer("moe_intermediate_size");  // gate, up, down
  double streamed = hidden + vocab * hidden;  // final norm, lm_head (tied or not)
  double projections = 0;
  double experts_not_streamed = 0;
  for (int64_t i = 0; i < num_layers; ++i) {
    const LayerAttentionConfig& layer = config.layers[i];
    projections += hidden * layer.num_q_heads * (layer.head_size_k + layer.head_size_v);  // q, o
    if (layer.kv_source == KvSource::kOwn) {
      projections += hidden * layer.num_kv_heads * layer.head_size_k;  // k
      const bool k_eq_v = flag("attention_k_eq_v") && layer.kind == AttentionKind::kFull;
      if (!k_eq_v) projections += hidden * layer.num_kv_heads * layer.head_size_v;
    }
    const bool wide = flag("use_double_wide_mlp") && i >= first_shared && first_shared > 0;
    if (!moe_layer[i] || !moe_replaces_mlp) projections += 3 * hidden * (wide ? 2 * inner : inner);
    if (moe_layer[i]) {
      projections += experts * expert;
      experts_not_streamed += (experts - top_k) * expert;
      streamed += experts * hidden;  // the router
    }
    streamed += (gemma ? 4 : 2) * hidden;
    if (ple > 0) streamed += 2 * ple * hidden + hidden;  // gate, projection, norm
  }
  double lookups = vocab * hidden;
  if (ple > 0) {
    streamed += static_cast<double>(num_layers) * ple * hidden + ple;  // model projection, norm
    lookups += integer("vocab_size_per_layer_input") * static_cast<double>(num_layers) * ple;
  }
  streamed += projections - experts_not_streamed;
  const bool tied = gemma || flag("tie_word_embeddings");
  const double params = streamed + experts_not_streamed + lookups - (tied ? vocab * hidden : 0);
  if (!(params < 0x1p62)) {
    fail("{}: the config describes about {:.3g} weights, more than 64-bit sizes hold",
         config.source, params);
  }
  return {.params = static_cast<int64_t>(params),
          .streamed_params = static_cast<int64_t>(streamed),
          .projection_params = static_cast<int64_t>(projections)};
}

WeightEstimate estimate_rank_weights(const ModelConfig& config, int64_t tp_size) {
  ModelConfig rank = rank_model_config(config, tp_size);
  if (tp_size > 1) {
    const ConfigReader text(config.text_config, config.source);
    rank.text_config["intermediate_size"] = text.positive("intermediate_size") / tp_size;
    // Experts are dealt whole: the first rank holds the most.
    for (const char* key : {"n_routed_experts", "num_experts"}) {
      if (text.has(key)) rank.text_config[key] = (text.positive(key) + tp_size - 1) / tp_size;
    }
  }
  return find_architecture(rank.architecture).estimate_weights(rank);
}

double estimate_weight_bytes(int64_t params, int64_t projections, DType dtype,
                             const QuantizationConfig& quantization) {
  const double plain = static_cast<double>(params) * static_cast<double>(dtype_size(dtype));
  if (!quantization.fp8) return plain;
  const double scale_bytes =
      quantization.per_tensor
          ? 0.0
          : 4.0 / static_cast<double>(quantization.block_rows * quantization.block_cols);
  return plain - static_cast<double>(projections) *
                     (static_cast<double>(dtype_size(dtype)) - 1.0 - scale_bytes);
}

}  // namespace pagoda
