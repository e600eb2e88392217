// Gemma 4 text (Gemma4ForCausalLM, and the text path of Gemma4ForConditionalGeneration).
//
// Per layer: attention (q/k norms, a weightless v norm, scale 1, per-type RoPE, V = raw K on full
// layers with attention_k_eq_v, no K/V at all on KV-shared layers) and a gelu-tanh MLP, each
// wrapped in pre- and post-norms; an optional MoE branch beside the MLP; per-layer inputs (PLE)
// gated into the residual; and a learned scalar on the whole hidden state. Norms scale by w (not
// 1 + w). Embeddings are scaled by sqrt(hidden) rounded to the weight dtype; logits are softcapped.
#include <cmath>
#include <cstring>

#include "model/arch/gemma4.h"
#include "model/layers/rope_config.h"
#include "ops/cpu/matmul.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

// `value` rounded to `dtype`, as a scale multiplied in the weight dtype would be.
float round_to(DType dtype, float value) {
  std::byte bytes[4];
  cpu::store_float(bytes, dtype, value);
  return cpu::load_float(bytes, dtype);
}

float read_scalar(WeightSource& weights, const std::string& name) {
  return cpu::to_floats(weights.get(name, {1}))[0];
}

// The per-layer table [ple_vocab, width] grown to `vocab` rows, each row past its own a copy of
// row 0: a token past vocab_size_per_layer_input reads row 0 of it, as transformers reads it.
Tensor repeat_row_zero_to(const Tensor& table, int64_t vocab) {
  const Tensor host = table.to(Device::cpu());
  const size_t row_bytes = static_cast<size_t>(host.size(1) * host.element_size());
  Tensor grown = Tensor::empty({vocab, host.size(1)}, host.dtype());
  std::memcpy(grown.raw_data(), host.raw_data(), static_cast<size_t>(host.size(0)) * row_bytes);
  for (int64_t row = host.size(0); row < vocab; ++row)
    std::memcpy(grown.raw_data() + static_cast<size_t>(row) * row_bytes, host.raw_data(),
                row_bytes);
  return grown.to(table.device());
}

}  // namespace

Gemma4Model::Gemma4Model(const ModelConfig& config, WeightSource& weights,
                         const TensorParallel& tp) {
  const ConfigReader text(config.text_config, config.source);
  const std::string prefix =
      config.architecture == "Gemma4ForConditionalGeneration" ? "model.language_model." : "model.";
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  const int64_t num_layers = static_cast<int64_t>(config.layers.size());
  const float eps = static_cast<float>(text.number_in("rms_norm_eps", 1e-6, 0.0, 1.0));
  const std::string act = text.optional_string("hidden_activation").value_or("gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    text.fail_field("hidden_activation", "is '" + act + "'; supported: gelu_pytorch_tanh");
  }
  if (text.boolean_or("attention_bias", false)) {
    text.fail_field("attention_bias", "is true; biases are not supported yet");
  }
  const int64_t inner = text.positive("intermediate_size");
  const bool double_wide = text.boolean_or("use_double_wide_mlp", false);
  const bool k_eq_v = text.boolean_or("attention_k_eq_v", false);
  const bool moe = text.boolean_or("enable_moe_block", false);
  int64_t first_shared = num_layers;
  for (int64_t i = 0; i < num_layers; ++i) {
    if (config.layers[i].kv_source != KvSource::kOwn) {
      first_shared = i;
      break;
    }
  }

  embed_tokens_ = weights.get(prefix + "embed_tokens.weight", {vocab, hidden});
  embed_scale_ = round_to(embed_tokens_.dtype(), std::sqrt(static_cast<float>(hidden)));
  ple_size_ = text.integer_or("hidden_size_per_layer_input", 0);
  if (ple_size_ < 0 || ple_size_ > ConfigReader::kMaxConfigInteger) {
    text.fail_field("hidden_size_per_layer_input",
                    fmt::format("is {}; it must be in [0, 2^40]", ple_size_));
  }
  if (ple_size_ > 0) {
    const int64_t ple_vocab = text.positive("vocab_size_per_layer_input");
    ple_table_ =
        weights.get(prefix + "embed_tokens_per_layer.weight", {ple_vocab, num_layers * ple_size_});
    if (ple_vocab < vocab) ple_table_ = repeat_row_zero_to(ple_table_, vocab);
    ple_scale_ = round_to(ple_table_.dtype(), std::sqrt(static_cast<float>(ple_size_)));
    ple_projection_ =
        weights.get(prefix + "per_layer_model_projection.weight", {num_layers * ple_size_, hidden});
    ple_norm_ = RmsNorm::load(weights, prefix + "per_layer_projection_norm.weight", ple_size_, eps);
  }

  const nlohmann::json rope_by_type = text.raw().value("rope_parameters", nlohmann::json());
  for (int64_t i = 0; i < num_layers; ++i) {
    const LayerAttentionConfig& attention = config.layers[i];
    const std::string layer = prefix + "layers." + std::to_string(i);
    const bool full = attention.kind == AttentionKind::kFull;
    const char* type = full ? "full_attention" : "sliding_attention";
    if (!rope_by_type.is_object() || !rope_by_type.contains(type)) {
      text.fail_field("rope_parameters", std::string("needs an entry for ") + type);
    }
    const RopeParams rope =
        parse_rope_object(text, rope_by_type.at(type), attention.head_size_k, full ? 1e6 : 1e4);
    const SelfAttentionOptions options{
        .qk_norm = true, .v_norm = true, .k_eq_v = full && k_eq_v, .scale = 1.0f, .norm_eps = eps};
    Layer l{.input_norm = RmsNorm::load(weights, layer + ".input_layernorm.weight", hidden, eps),
            .attention = std::make_unique<SelfAttention>(weights, layer + ".self_attn", hidden,
                                                         attention, rope, options, tp),
            .post_attention_norm =
                RmsNorm::load(weights, layer + ".post_attention_layernorm.weight", hidden, eps),
            .pre_feedforward_norm =
                RmsNorm::load(weights, layer + ".pre_feedforward_layernorm.weight", hidden, eps),
            .post_feedforward_norm =
                RmsNorm::load(weights, layer + ".post_feedforward_layernorm.weight", hidden, eps),
            .mlp = GatedMlp::load(
                weights, layer + ".mlp", hidden,
                double_wide && i >= first_shared && first_shared > 0 ? 2 * inner : inner,
                cpu::Activation::kGeluTanh, tp),
            .layer_scalar = read_scalar(weights, layer + ".layer_scalar")};
    if (moe) l.moe = load_moe(weights, text, layer, hidden, eps, tp);
    if (ple_size_ > 0) {
      l.ple_gate = weights.get(layer + ".per_layer_input_gate.weight", {ple_size_, hidden});
      l.ple_projection = weights.get(layer + ".per_layer_projection.weight", {hidden, ple_size_});
      l.ple_norm = RmsNorm::load(weights, layer + ".post_per_layer_input_norm.weight", hidden, eps);
    }
    if (attention.kv_source == KvSource::kEarlierLayer) {
      l.attention->use_cache_scales_of(*layers_.at(attention.kv_source_layer).attention);
    }
    layers_.push_back(std::move(l));
  }
  norm_ = RmsNorm::load(weights, prefix + "norm.weight", hidden, eps);
  if (text.has("final_logit_softcapping")) {
    softcap_ = static_cast<float>(text.number_or("final_logit_softcapping", 0.0));
  }
}

Gemma4Model::Moe Gemma4Model::load_moe(WeightSource& weights, const ConfigReader& text,
                                       const std::string& layer, int64_t hidden, float eps,
                                       const TensorParallel& tp) {
  const int64_t experts = text.positive("num_experts");
  const int64_t top_k = text.positive("top_k_experts");
  const int64_t inner = text.positive("moe_intermediate_size");
  if (top_k > experts) text.fail_field("top_k_experts", "is larger than num_experts");
  Moe moe{.router = weights.get(layer + ".router.proj.weight", {experts, hidden}),
          .router_scale = cpu::to_floats(weights.get(layer + ".router.scale", {hidden})),
          .per_expert_scale =
              cpu::to_floats(weights.get(layer + ".router.per_expert_scale", {experts})),
          .gate_up = weights.get(layer + ".experts.gate_up_proj", {experts, 2 * inner, hidden},
                                 tp.share(0, experts)),
          .down = weights.get(layer + ".experts.down_proj", {experts, hidden, inner},
                              tp.share(0, experts)),
          .first_expert = tp.first_of(experts),
          .tp = tp,
          .pre_norm =
              RmsNorm::load(weights, layer + ".pre_feedforward_layernorm_2.weight", hidden, eps),
          .post_mlp_norm =
              RmsNorm::load(weights, layer + ".post_feedforward_layernorm_1.weight", hidden, eps),
          .post_experts_norm =
              RmsNorm::load(weights, layer + ".post_feedforward_layernorm_2.weight", hidden, eps),
          .top_k = top_k,
          .eps = eps};
  if (!weights.device().is_cpu()) {
    // On a GPU the router's scale and hidden^-0.5 become the weight of its norm.
    Tensor scale = Tensor::empty({hidden}, DType::kF32);
    const float root = 1.0f / std::sqrt(static_cast<float>(hidden));
    for (int64_t h = 0; h < hidden; ++h)
      scale.data<float>()[h] = moe.router_scale[h] * root;
    moe.router_norm_weight = scale.to(weights.device());
  }
  return moe;
}

// Router on the raw residual: a weightless norm, a learned per-channel scale and hidden^-0.5, a
// softmax over experts, the top k renormalised and scaled per expert. The chosen experts' gated
// MLPs run on the separately normed input and are summed in ascending expert order.
Tensor Gemma4Model::run_moe(const Moe& moe, const Tensor& residual) const {
  const int64_t tokens = residual.size(0);
  const int64_t hidden = residual.size(1);
  const int64_t experts = moe.router.size(0);
  const int64_t inner = moe.down.size(2);
  Tensor z = ops::like(residual, residual.shape());
  if (residual.device().is_cpu()) {
    cpu::rms_norm(residual, Tensor(), moe.eps, 0.0f, z);
    const float root = 1.0f / std::sqrt(static_cast<float>(hidden));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) {
        float& value = z.data<float>()[t * hidden + h];
        value = value * moe.router_scale[h] * root;
      }
    }
  } else {
    ops::rms_norm(residual, moe.router_norm_weight, moe.eps, 0.0f, z);
  }
  // Routing runs on the host.
  const Tensor logits = ops::linear(z, moe.router, DType::kF32).to(Device::cpu());
  // Per token: the chosen experts and their weights.
  ExpertChoices chosen(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data<float>() + t * experts;
    float max = row[0];
    for (int64_t e = 1; e < experts; ++e)
      max = std::max(max, row[e]);
    std::vector<float> p(experts);
    float sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      sum += (p[e] = std::exp(row[e] - max));
    std::vector<int64_t> order(experts);
    for (int64_t e = 0; e < experts; ++e)
      order[e] = e;
    std::partial_sort(order.begin(), order.begin() + moe.top_k, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float kept = 0;
    for (int64_t k = 0; k < moe.top_k; ++k)
      kept += p[order[k]] / sum;
    for (int64_t k = 0; k < moe.top_k; ++k) {
      const int64_t e = order[k];
      chosen[t].push_back({e, p[e] / sum / kept * moe.per_expert_scale[e]});
    }
  }
  Tensor xe = ops::like(residual, residual.shape());
  moe.pre_norm.apply(residual, xe);
  return mix_experts(xe, chosen, moe.first_expert, moe.gate_up.size(0), moe.tp,
                     [&](int64_t e, const Tensor& rows) {
                       const Tensor gate_up = moe.gate_up.select(0, e - moe.first_expert);
                       const Tensor gate = project(rows, gate_up.narrow(0, 0, inner));
                       ops::gated_activation(Activation::kGeluTanh, gate,
                                             project(rows, gate_up.narrow(0, inner, inner)), gate);
                       return project(gate, moe.down.select(0, e - moe.first_expert));
                     });
}

Tensor Gemma4Model::per_layer_inputs(const std::vector<int32_t>& ids, const Tensor& device_ids,
                                     const Tensor& x0) const {
  const int64_t tokens = x0.size(0);
  const int64_t num_layers = static_cast<int64_t>(layers_.size());
  // Token part: the per-layer table, scaled by sqrt(P).
  Tensor token_part = ops::like(x0, {tokens, num_layers * ple_size_});
  ops::embedding(ple_table_, ids, device_ids, 1.0f, token_part);
  ops::scale_in_place(token_part, ple_scale_);
  // Context part: a projection of the scaled embeddings, normed per layer.
  Tensor context = project(x0, ple_projection_);
  ops::scale_in_place(context, 1.0f / std::sqrt(static_cast<float>(x0.size(1))));
  const Tensor rows = context.view({tokens * num_layers, ple_size_});
  ple_norm_.apply(rows, rows);
  ops::add_in_place(context, token_part);
  ops::scale_in_place(context, 1.0f / std::sqrt(2.0f));
  return context;
}

Tensor Gemma4Model::embed(const std::vector<int32_t>& ids, const Tensor& device_ids) const {
  const Device device = embed_tokens_.device();
  Tensor x = Tensor::uninitialized({static_cast<int64_t>(ids.size()), embed_tokens_.size(1)},
                                   ops::activation_dtype(device), device);
  ops::embedding(embed_tokens_, ids, device_ids, 1.0f, x);
  ops::scale_in_place(x, embed_scale_);
  return x;
}

void Gemma4Model::use_cache_scales_of(int64_t layer, const Gemma4Model& target,
                                      int64_t target_layer) {
  layers_.at(layer).attention->use_cache_scales_of(*target.layers_.at(target_layer).attention);
}

Tensor Gemma4Model::forward(const ForwardBatch& batch) {
  const Tensor x = embed(batch.token_ids, batch.device_token_ids);
  const Tensor ple =
      ple_size_ > 0 ? per_layer_inputs(batch.token_ids, batch.device_token_ids, x) : Tensor();
  return run_layers(x, ple, batch);
}

Tensor Gemma4Model::run_layers(const Tensor& input, const Tensor& ple,
                               const ForwardBatch& batch) const {
  PAGODA_CHECK(ple.defined() == (ple_size_ > 0), "per-layer inputs given to a model without them");
  Tensor x = input.clone();
  Tensor normed = ops::like(x, x.shape());
  // Each block's output norm, residual add and layer scalar go in one op with the next norm: the
  // next block's input norm, or the final norm after the last layer.
  layers_.front().input_norm.apply(x, normed);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    const RmsNorm& next_norm = i + 1 < layers_.size() ? layers_[i + 1].input_norm : norm_;
    const Tensor attended = layer.attention->forward(normed, batch, static_cast<int64_t>(i));
    ops::add_normed(x, attended, layer.post_attention_norm, 1.0f, layer.pre_feedforward_norm,
                    normed);

    Tensor mlp = layer.mlp.forward(normed);
    if (layer.moe) {
      layer.moe->post_mlp_norm.apply(mlp, mlp);
      Tensor experts = run_moe(*layer.moe, x);
      layer.moe->post_experts_norm.apply(experts, experts);
      ops::add_in_place(mlp, experts);
    }
    if (ple_size_ == 0) {
      ops::add_normed(x, mlp, layer.post_feedforward_norm, layer.layer_scalar, next_norm, normed);
      continue;
    }
    ops::add_normed(x, mlp, layer.post_feedforward_norm, 1.0f, {}, Tensor());
    const Tensor slice = ple.narrow(1, static_cast<int64_t>(i) * ple_size_, ple_size_);
    const Tensor gate = ops::gated_linear(x, layer.ple_gate, Activation::kGeluTanh, slice);
    const Tensor projected = project(gate, layer.ple_projection);
    ops::add_normed(x, projected, layer.ple_norm, layer.layer_scalar, next_norm, normed);
  }
  return normed;
}

Tensor Gemma4Model::compute_logits(const Tensor& hidden) {
  Tensor logits = ops::linear(hidden, embed_tokens_, DType::kF32);
  if (softcap_ > 0.0f) ops::softcap_in_place(logits, softcap_);
  return logits;
}

bool Gemma4Model::synchronizes_with_host() const {
  return std::any_of(layers_.begin(), layers_.end(),
                     [](const Layer& layer) { return layer.moe.has_value(); });
}

std::unique_ptr<CausalLm> build_gemma4(const ModelConfig& config, WeightSource& weights,
                                       const TensorParallel& tp) {
  return std::make_unique<Gemma4Model>(config, weights, tp);
}

}  // namespace pagoda
