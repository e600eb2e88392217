// MiMo-V2-Flash: Llama-style pre-norm layers whose attention has K heads of 192 and V heads of 128
// (split pages), sliding layers with their own KV heads and a per-head sink logit, V scaled before
// the cache, partial RoPE per layer type; dense SwiGLU or a sigmoid-routed MoE per layer
// (DeepSeek-V3 style: a correction bias that only chooses, group-limited top-k, normalised
// weights, routed scaling). model.mtp.* tensors are not used.
#include "model/arch/mimo_v2_flash.h"
#include "ops/ops.h"

#include <cmath>
#include <limits>

#include "model/arch/llama.h"
#include "model/layers/rope_config.h"

namespace pagoda {
namespace {

// Whether layer i is a mixture of experts: transformers' mlp_layer_types ("dense" / "sparse") or
// the published moe_layer_freq (0 / 1).

}  // namespace

std::vector<bool> read_mimo_sparse_layers(const ConfigReader& text, int64_t num_layers) {
  std::vector<bool> sparse(num_layers, false);
  if (auto types = text.optional_string_list("mlp_layer_types")) {
    if (static_cast<int64_t>(types->size()) != num_layers) {
      text.fail_field("mlp_layer_types", "does not have one entry per layer");
    }
    for (int64_t i = 0; i < num_layers; ++i) {
      if ((*types)[i] != "dense" && (*types)[i] != "sparse") {
        text.fail_field("mlp_layer_types",
                        "has entry '" + (*types)[i] + "'; expected dense or sparse");
      }
      sparse[i] = (*types)[i] == "sparse";
    }
  } else if (auto frequency = text.optional_integer_list("moe_layer_freq")) {
    if (static_cast<int64_t>(frequency->size()) != num_layers) {
      text.fail_field("moe_layer_freq", "does not have one entry per layer");
    }
    for (int64_t i = 0; i < num_layers; ++i)
      sparse[i] = (*frequency)[i] != 0;
  }
  return sparse;
}

MiMoV2FlashModel::MiMoV2FlashModel(const ModelConfig& config, WeightSource& weights,
                                   const TensorParallel& tp) {
  const ConfigReader text(config.text_config, config.source);
  if (text.boolean_or("attention_bias", false)) {
    text.fail_field("attention_bias", "is true; biases are not supported yet");
  }
  const int64_t hidden = config.hidden_size;
  const int64_t vocab = config.vocab_size;
  const int64_t num_layers = static_cast<int64_t>(config.layers.size());
  const float eps = static_cast<float>(text.number_in(
      "layernorm_epsilon", text.number_in("rms_norm_eps", 1e-5, 0.0, 1.0), 0.0, 1.0));
  const cpu::Activation activation = read_gated_activation(text);
  const float value_scale = static_cast<float>(text.number_or("attention_value_scale", 1.0));
  const std::vector<bool> sparse = read_mimo_sparse_layers(text, num_layers);
  // Sinks: on sliding layers unless the published flags say otherwise.
  const bool sliding_sinks = text.boolean_or("add_swa_attention_sink_bias", true);
  const bool full_sinks = text.boolean_or("add_full_attention_sink_bias", false);

  embed_tokens_ = weights.get("model.embed_tokens.weight", {vocab, hidden});
  for (int64_t i = 0; i < num_layers; ++i) {
    const LayerAttentionConfig& attention = config.layers[i];
    const std::string prefix = "model.layers." + std::to_string(i);
    const bool full = attention.kind == AttentionKind::kFull;
    RopeParams rope;
    if (text.has("rope_parameters") &&
        text.raw().at("rope_parameters").contains(full ? "full_attention" : "sliding_attention")) {
      rope = parse_rope_object(
          text, text.raw().at("rope_parameters").at(full ? "full_attention" : "sliding_attention"),
          attention.head_size_k, full ? 5e6 : 1e4);
    } else {
      // The published spelling: rope_theta for full layers, swa_rope_theta for sliding ones.
      nlohmann::json rope_object = {{"rope_type", "default"}};
      if (!full && text.has("swa_rope_theta"))
        rope_object["rope_theta"] = text.raw().at("swa_rope_theta");
      rope = parse_rope_object(text, rope_object, attention.head_size_k, full ? 5e6 : 1e4);
    }
    const SelfAttentionOptions options{
        .value_scale = value_scale, .sinks = full ? full_sinks : sliding_sinks, .norm_eps = eps};
    Layer layer{
        .input_norm = RmsNorm::load(weights, prefix + ".input_layernorm.weight", hidden, eps),
        .attention = std::make_unique<SelfAttention>(weights, prefix + ".self_attn", hidden,
                                                     attention, rope, options, tp),
        .post_attention_norm =
            RmsNorm::load(weights, prefix + ".post_attention_layernorm.weight", hidden, eps)};
    if (sparse[i]) {
      layer.moe = load_moe(weights, text, prefix + ".mlp", hidden, tp);
    } else {
      layer.mlp = GatedMlp::load(weights, prefix + ".mlp", hidden,
                                 text.positive("intermediate_size"), activation, tp);
    }
    layers_.push_back(std::move(layer));
  }
  norm_ = RmsNorm::load(weights, "model.norm.weight", hidden, eps);
  lm_head_ = text.boolean_or("tie_word_embeddings", false)
                 ? embed_tokens_
                 : weights.get("lm_head.weight", {vocab, hidden});
}

MiMoV2FlashModel::Moe MiMoV2FlashModel::load_moe(WeightSource& weights, const ConfigReader& text,
                                                 const std::string& prefix, int64_t hidden,
                                                 const TensorParallel& tp) {
  Moe moe;
  const int64_t experts = text.positive("n_routed_experts");
  const int64_t inner = text.positive("moe_intermediate_size");
  moe.top_k = text.positive("num_experts_per_tok");
  moe.num_groups = text.positive_or("n_group", 1);
  moe.top_groups = text.positive_or("topk_group", 1);
  moe.normalize = text.boolean_or("norm_topk_prob", true);
  moe.routed_scale = static_cast<float>(text.number_or("routed_scaling_factor", 1.0));
  if (experts % moe.num_groups != 0 || moe.top_groups > moe.num_groups ||
      moe.top_k > moe.top_groups * (experts / moe.num_groups)) {
    text.fail_field("n_group", "does not divide the experts into groups that can supply the top-k");
  }
  moe.router = weights.get(prefix + ".gate.weight", {experts, hidden});
  moe.bias = cpu::to_floats(weights.get(prefix + ".gate.e_score_correction_bias", {experts}));
  moe.first_expert = tp.first_of(experts);
  moe.tp = tp;
  for (int64_t e = moe.first_expert; e < moe.first_expert + tp.share_of(experts); ++e) {
    const std::string expert = prefix + ".experts." + std::to_string(e);
    moe.experts.push_back({weights.get_weight(expert + ".gate_proj.weight", {inner, hidden}),
                           weights.get_weight(expert + ".up_proj.weight", {inner, hidden}),
                           weights.get_weight(expert + ".down_proj.weight", {hidden, inner})});
  }
  return moe;
}

Tensor MiMoV2FlashModel::run_moe(const Moe& moe, const Tensor& x) {
  const int64_t tokens = x.size(0);
  const int64_t experts = moe.router.size(0);
  const int64_t group_size = experts / moe.num_groups;
  // Routing runs on the host.
  const Tensor logits = ops::linear(x, moe.router, DType::kF32).to(Device::cpu());
  ExpertChoices chosen(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> score(experts);
    std::vector<float> choice(experts);
    for (int64_t e = 0; e < experts; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits.data<float>()[t * experts + e]));
      choice[e] = score[e] + moe.bias[e];
      // A NaN (from NaN weights or bias) ranks last, so the sorts below see an ordering.
      if (std::isnan(choice[e])) choice[e] = -std::numeric_limits<float>::infinity();
    }
    // Groups ranked by the sum of their two best choice scores; experts outside the best groups
    // cannot be chosen.
    std::vector<float> group_score(moe.num_groups);
    for (int64_t g = 0; g < moe.num_groups; ++g) {
      std::vector<float> members(choice.begin() + g * group_size,
                                 choice.begin() + (g + 1) * group_size);
      std::sort(members.begin(), members.end(), std::greater<>());
      group_score[g] = members[0] + (members.size() > 1 ? members[1] : 0.0f);
    }
    std::vector<int64_t> groups(moe.num_groups);
    for (int64_t g = 0; g < moe.num_groups; ++g)
      groups[g] = g;
    std::sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) {
      return group_score[a] > group_score[b] || (group_score[a] == group_score[b] && a < b);
    });
    for (int64_t r = moe.top_groups; r < moe.num_groups; ++r) {
      for (int64_t e = groups[r] * group_size; e < (groups[r] + 1) * group_size; ++e) {
        choice[e] = -std::numeric_limits<float>::infinity();
      }
    }
    std::vector<int64_t> order(experts);
    for (int64_t e = 0; e < experts; ++e)
      order[e] = e;
    std::partial_sort(order.begin(), order.begin() + moe.top_k, order.end(),
                      [&](int64_t a, int64_t b) {
                        return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
                      });
    float sum = 0.0f;
    for (int64_t k = 0; k < moe.top_k; ++k)
      sum += score[order[k]];
    for (int64_t k = 0; k < moe.top_k; ++k) {
      float weight = score[order[k]];
      if (moe.normalize) weight /= sum + 1e-20f;
      chosen[t].push_back({order[k], weight * moe.routed_scale});
    }
  }
  return mix_experts(
      x, chosen, moe.first_expert, static_cast<int64_t>(moe.experts.size()), moe.tp,
      [&](int64_t e, const Tensor& rows) {
        const Expert& expert = moe.experts[e - moe.first_expert];
        return GatedMlp{expert.gate, expert.up, expert.down, cpu::Activation::kSilu}.forward(rows);
      });
}

Tensor MiMoV2FlashModel::forward(const ForwardBatch& batch) {
  return pre_norm_decoder(batch, embed_tokens_, layers_, norm_,
                          [](const Layer& layer, const Tensor& x) {
                            return layer.moe ? run_moe(*layer.moe, x) : layer.mlp->forward(x);
                          });
}

Tensor MiMoV2FlashModel::compute_logits(const Tensor& hidden) {
  return ops::linear(hidden, lm_head_, DType::kF32);
}

bool MiMoV2FlashModel::synchronizes_with_host() const {
  return std::any_of(layers_.begin(), layers_.end(),
                     [](const Layer& layer) { return layer.moe.has_value(); });
}

std::unique_ptr<CausalLm> build_mimo_v2_flash(const ModelConfig& config, WeightSource& weights,
                                              const TensorParallel& tp) {
  return std::make_unique<MiMoV2FlashModel>(config, weights, tp);
}

}  // namespace pagoda
