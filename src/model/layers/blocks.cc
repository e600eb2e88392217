#include "model/layers/blocks.h"

#include <cmath>

#include "ops/cpu/matmul.h"

namespace pagoda {

Tensor project(const Tensor& x, const Tensor& weight) {
  Tensor out = Tensor::empty({x.size(0), weight.size(0)}, DType::kF32);
  cpu::linear(x, weight, out);
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
  const int64_t tokens = x.size(0);
  const int64_t inner = gate.size(0);
  // gate and up side by side so the activation reads one [T, 2 * inner] row per token.
  Tensor gate_up = Tensor::empty({tokens, 2 * inner}, DType::kF32);
  Tensor gate_out = project(x, gate);
  Tensor up_out = project(x, up);
  gate_up.narrow(1, 0, inner).copy_from(gate_out);
  gate_up.narrow(1, inner, inner).copy_from(up_out);
  Tensor activated = Tensor::empty({tokens, inner}, DType::kF32);
  cpu::gated_activation(activation, gate_up, activated);
  return project(activated, down);
}

SelfAttention::SelfAttention(WeightSource& weights, const std::string& prefix, int64_t hidden,
                             const LayerAttentionConfig& layer, const RopeParams& rope,
                             const SelfAttentionOptions& options) {
  params_.num_q_heads = layer.num_q_heads;
  params_.num_kv_heads = layer.num_kv_heads;
  params_.head_size_k = layer.head_size_k;
  params_.head_size_v = layer.head_size_v;
  params_.scale = 1.0f / std::sqrt(static_cast<float>(layer.head_size_k));
  params_.sliding_window = layer.sliding_window;
  const int64_t q_size = layer.num_q_heads * layer.head_size_k;
  q_proj_ = weights.get(prefix + ".q_proj.weight", {q_size, hidden});
  k_proj_ =
      weights.get(prefix + ".k_proj.weight", {layer.num_kv_heads * layer.head_size_k, hidden});
  v_proj_ =
      weights.get(prefix + ".v_proj.weight", {layer.num_kv_heads * layer.head_size_v, hidden});
  o_proj_ = weights.get(prefix + ".o_proj.weight", {hidden, layer.num_q_heads * layer.head_size_v});
  if (options.qk_norm) {
    q_norm_ =
        RmsNorm::load(weights, prefix + ".q_norm.weight", layer.head_size_k, options.norm_eps);
    k_norm_ =
        RmsNorm::load(weights, prefix + ".k_norm.weight", layer.head_size_k, options.norm_eps);
  }
  inverse_frequencies_ = rope_inverse_frequencies(rope);
  rotary_dim_ = rope.rotary_dim;
}

Tensor SelfAttention::forward(const Tensor& x, const ForwardBatch& batch,
                              int64_t layer_index) const {
  const int64_t tokens = x.size(0);
  const AttentionLayerParams& p = params_;
  Tensor q = project(x, q_proj_).view({tokens, p.num_q_heads, p.head_size_k});
  Tensor k = project(x, k_proj_).view({tokens, p.num_kv_heads, p.head_size_k});
  Tensor v = project(x, v_proj_).view({tokens, p.num_kv_heads, p.head_size_v});
  if (q_norm_) {
    const Tensor q_rows = q.view({tokens * p.num_q_heads, p.head_size_k});
    const Tensor k_rows = k.view({tokens * p.num_kv_heads, p.head_size_k});
    q_norm_->apply(q_rows, q_rows);
    k_norm_->apply(k_rows, k_rows);
  }
  apply_rope_cpu(inverse_frequencies_, rotary_dim_, batch.positions, q);
  apply_rope_cpu(inverse_frequencies_, rotary_dim_, batch.positions, k);
  Tensor attended = Tensor::empty({tokens, p.num_q_heads * p.head_size_v}, DType::kF32);
  const int64_t group = (*batch.layer_groups)[layer_index];
  cpu_paged_attention(p, q, k, v, batch.kv_cache->views[layer_index], batch.group_metadata[group],
                      attended);
  return project(attended, o_proj_);
}

}  // namespace pagoda
