// Llama: pre-norm decoder layers of self-attention and a SiLU-gated MLP, RMSNorm, RoPE (default,
// linear or llama3 scaling), optional tied embeddings.
#include "model/arch/llama.h"

#include "model/layers/rope_config.h"
#include "ops/ops.h"

namespace pagoda {

cpu::Activation read_gated_activation(const ConfigReader& text) {
  const std::string act = text.optional_string("hidden_act").value_or("silu");
  if (act == "silu" || act == "swish") return cpu::Activation::kSilu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") return cpu::Activation::kGeluTanh;
  text.fail_field("hidden_act", "is '" + act + "'; supported: silu, gelu_pytorch_tanh");
}

LlamaModel::LlamaModel(const ModelConfig& config, WeightSource& weights,
                       const SelfAttentionOptions& attention_options, const TensorParallel& tp) {
  const ConfigReader text(config.text_config, config.source);
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (text.boolean_or(key, false)) text.fail_field(key, "is true; biases are not supported yet");
  }
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  const int64_t inner = text.positive("intermediate_size");
  const float eps = static_cast<float>(text.number_in("rms_norm_eps", 1e-6, 0.0, 1.0));
  const cpu::Activation activation = read_gated_activation(text);
  SelfAttentionOptions options = attention_options;
  options.norm_eps = eps;

  embed_tokens_ = weights.get("model.embed_tokens.weight", {vocab, hidden});
  for (size_t i = 0; i < config.layers.size(); ++i) {
    const std::string prefix = "model.layers." + std::to_string(i);
    const LayerAttentionConfig& attention = config.layers[i];
    const RopeParams rope = read_rope_params(text, attention.head_size_k, 10000.0);
    layers_.push_back(
        Layer{RmsNorm::load(weights, prefix + ".input_layernorm.weight", hidden, eps),
              std::make_unique<SelfAttention>(weights, prefix + ".self_attn", hidden, attention,
                                              rope, options, tp),
              RmsNorm::load(weights, prefix + ".post_attention_layernorm.weight", hidden, eps),
              GatedMlp::load(weights, prefix + ".mlp", hidden, inner, activation, tp)});
  }
  norm_ = RmsNorm::load(weights, "model.norm.weight", hidden, eps);
  lm_head_ = text.boolean_or("tie_word_embeddings", false)
                 ? embed_tokens_
                 : weights.get("lm_head.weight", {vocab, hidden});
}

Tensor LlamaModel::forward(const ForwardBatch& batch) {
  return pre_norm_decoder(batch, embed_tokens_, layers_, norm_,
                          [](const Layer& layer, const Tensor& x) { return layer.mlp.forward(x); });
}

Tensor LlamaModel::compute_logits(const Tensor& hidden) {
  return ops::linear(hidden, lm_head_, DType::kF32);
}

std::unique_ptr<CausalLm> build_llama(const ModelConfig& config, WeightSource& weights,
                                      const TensorParallel& tp) {
  return std::make_unique<LlamaModel>(config, weights, SelfAttentionOptions{}, tp);
}

}  // namespace pagoda
