#include "model/layers/blocks.h"

#include <cmath>

#include "ops/cpu/matmul.h"

namespace pagoda {

Tensor project(const Tensor& x, const Tensor& weight) {
  Tensor out = Tensor::empty({x.size(0), weight.size(0)}, DType::kF32);
  cpu::linear(x, weight, out);
  return out;
}

Tensor mix_experts(const Tensor& x, const ExpertChoices& chosen, int64_t num_experts,
                   const std::function<Tensor(int64_t, const Tensor&)>& expert) {
  const int64_t hidden = x.size(1);
  Tensor out = Tensor::empty(x.shape(), DType::kF32);
  for (int64_t e = 0; e < num_experts; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> weights;
    for (int64_t t = 0; t < static_cast<int64_t>(chosen.size()); ++t) {
      for (const auto& [choice, weight] : chosen[t]) {
        if (choice == e) {
          rows.push_back(t);
          weights.push_back(weight);
        }
      }
    }
    if (rows.empty()) continue;
    const int64_t count = static_cast<int64_t>(rows.size());
    Tensor gathered = Tensor::empty({count, hidden}, DType::kF32);
    for (int64_t r = 0; r < count; ++r)
      gathered.select(0, r).copy_from(x.select(0, rows[r]));
    const Tensor y = expert(e, gathered);
    for (int64_t r = 0; r < count; ++r) {
      float* dst = out.data<float>() + rows[r] * hidden;
      const float* src = y.data<float>() + r * hidden;
      for (int64_t h = 0; h < hidden; ++h)
        dst[h] += weights[r] * src[h];
    }
  }
  return out;
}

RmsNorm RmsNorm::load(WeightSource& weights, const std::string& name, int64_t dim, float eps,
                      float weight_offset) {
  return RmsNorm{weights.get(name, {dim}), eps, weight_offset};
}

void RmsNorm::apply(const Tensor& x, const Tensor& out) const {
  cpu::rms_norm(x, weight, eps, weight_offset, out);
}

GatedMlp GatedMlp::load(WeightSource& weights, const std::string& prefix, int64_t hidden,
                        int64_t inner, cpu::Activation activation) {
  return GatedMlp{weights.get(prefix + ".gate_proj.weight", {inner, hidden}),
                  weights.get(prefix + ".up_proj.weight", {inner, hidden}),
                  weights.get(prefix + ".down_proj.weight", {hidden, inner}), activation};
}

Tensor GatedMlp::forward(const Tensor& x) const {
  Tensor gate_out = project(x, gate);
  cpu::gated_activation(activation, gate_out, project(x, up), gate_out);
  return project(gate_out, down);
}

SelfAttention::SelfAttention(WeightSource& weights, const std::string& prefix, int64_t hidden,
                             const LayerAttentionConfig& layer, const RopeParams& rope,
                             const SelfAttentionOptions& options)
    : options_(options), owns_kv_(layer.kv_source == KvSource::kOwn) {
  params_.num_q_heads = layer.num_q_heads;
  params_.num_kv_heads = layer.num_kv_heads;
  params_.head_size_k = layer.head_size_k;
  params_.head_size_v = layer.head_size_v;
  params_.scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(layer.head_size_k)));
  params_.sliding_window = layer.sliding_window;
  const int64_t q_size = layer.num_q_heads * layer.head_size_k;
  q_proj_ = weights.get(prefix + ".q_proj.weight", {q_size, hidden});
  o_proj_ = weights.get(prefix + ".o_proj.weight", {hidden, layer.num_q_heads * layer.head_size_v});
  if (options.qk_norm) {
    q_norm_ =
        RmsNorm::load(weights, prefix + ".q_norm.weight", layer.head_size_k, options.norm_eps);
  }
  if (owns_kv_) {
    k_proj_ =
        weights.get(prefix + ".k_proj.weight", {layer.num_kv_heads * layer.head_size_k, hidden});
    if (!options.k_eq_v) {
      v_proj_ =
          weights.get(prefix + ".v_proj.weight", {layer.num_kv_heads * layer.head_size_v, hidden});
    }
    if (options.qk_norm) {
      k_norm_ =
          RmsNorm::load(weights, prefix + ".k_norm.weight", layer.head_size_k, options.norm_eps);
    }
  }
  if (options.sinks) {
    const std::string name =
        prefix + (weights.has(prefix + ".sinks") ? ".sinks" : ".attention_sink_bias");
    sinks_ = cpu::to_floats(weights.get(name, {layer.num_q_heads}));
  }
  inverse_frequencies_ = rope_inverse_frequencies(rope);
  rotary_dim_ = rope.rotary_dim;
}

Tensor SelfAttention::forward(const Tensor& x, const ForwardBatch& batch,
                              int64_t layer_index) const {
  const int64_t tokens = x.size(0);
  const AttentionLayerParams& p = params_;
  Tensor q = project(x, q_proj_).view({tokens, p.num_q_heads, p.head_size_k});
  if (q_norm_) {
    const Tensor rows = q.view({tokens * p.num_q_heads, p.head_size_k});
    q_norm_->apply(rows, rows);
  }
  apply_rope_cpu(inverse_frequencies_, rotary_dim_, batch.positions, q);
  Tensor k;
  Tensor v;
  if (owns_kv_) {
    const Tensor k_raw = project(x, k_proj_);
    // With k_eq_v, V is the K projection before its norm and RoPE.
    v = (options_.k_eq_v ? k_raw.clone() : project(x, v_proj_))
            .view({tokens, p.num_kv_heads, p.head_size_v});
    k = k_raw.view({tokens, p.num_kv_heads, p.head_size_k});
    if (k_norm_) {
      const Tensor rows = k.view({tokens * p.num_kv_heads, p.head_size_k});
      k_norm_->apply(rows, rows);
    }
    if (options_.value_scale != 1.0f) {
      float* data = v.data<float>();
      for (int64_t i = 0; i < v.numel(); ++i)
        data[i] *= options_.value_scale;
    }
    if (options_.v_norm) {
      const Tensor rows = v.view({tokens * p.num_kv_heads, p.head_size_v});
      cpu::rms_norm(rows, Tensor(), options_.norm_eps, 0.0f, rows);
    }
    apply_rope_cpu(inverse_frequencies_, rotary_dim_, batch.positions, k);
  }
  Tensor attended = Tensor::empty({tokens, p.num_q_heads * p.head_size_v}, DType::kF32);
  const int64_t group = (*batch.layer_groups)[layer_index];
  AttentionLayerParams params = p;
  if (!sinks_.empty()) params.sinks = sinks_.data();
  cpu_paged_attention(params, q, k, v, batch.kv_cache->views[layer_index],
                      batch.group_metadata[group], attended);
  return project(attended, o_proj_);
}

}  // namespace pagoda
