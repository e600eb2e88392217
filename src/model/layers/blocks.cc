#include "model/layers/blocks.h"

#include <cmath>
#include <limits>

#include "attention/context_merge.h"
#include "ops/ops.h"

namespace pagoda {

Tensor project(const Tensor& x, const Weight& weight) {
  return ops::linear(x, weight);
}

Tensor mix_experts(const Tensor& x, const ExpertChoices& chosen, int64_t first, int64_t count,
                   const TensorParallel& tp,
                   const std::function<Tensor(int64_t, const Tensor&)>& expert) {
  const int64_t hidden = x.size(1);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  for (int64_t e = first; e < first + count; ++e) {
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
    const int64_t routed = static_cast<int64_t>(rows.size());
    Tensor gathered = ops::like(x, {routed, hidden});
    for (int64_t r = 0; r < routed; ++r)
      gathered.select(0, r).copy_from(x.select(0, rows[r]));
    const Tensor y = expert(e, gathered);
    for (int64_t r = 0; r < routed; ++r) {
      if (x.device().is_cpu()) {
        float* dst = out.data<float>() + rows[r] * hidden;
        const float* src = y.data<float>() + r * hidden;
        for (int64_t h = 0; h < hidden; ++h)
          dst[h] += weights[r] * src[h];
      } else {
        // Row by row on the device: MoE models run eagerly, tokens here are few.
        const Tensor row = y.narrow(0, r, 1);
        ops::scale_in_place(row, weights[r]);
        ops::add_in_place(out.narrow(0, rows[r], 1), row);
      }
    }
  }
  tp.all_reduce(out);
  return out;
}

RmsNorm RmsNorm::load(WeightSource& weights, const std::string& name, int64_t dim, float eps,
                      float weight_offset) {
  return RmsNorm{{weights.get(name, {dim}), eps, weight_offset}};
}

void RmsNorm::apply(const Tensor& x, const Tensor& out) const {
  ops::rms_norm(x, weight, eps, weight_offset, out);
}

void RmsNorm::add_apply(const Tensor& residual, const Tensor& x, const Tensor& out) const {
  ops::add_rms_norm(residual, x, weight, eps, weight_offset, out);
}

GatedMlp GatedMlp::load(WeightSource& weights, const std::string& prefix, int64_t hidden,
                        int64_t inner, cpu::Activation activation, const TensorParallel& tp) {
  GatedMlp mlp{
      weights.get_weight(prefix + ".gate_proj.weight", {inner, hidden}, tp.share(0, inner)),
      weights.get_weight(prefix + ".up_proj.weight", {inner, hidden}, tp.share(0, inner)),
      weights.get_weight(prefix + ".down_proj.weight", {hidden, inner}, tp.share(1, inner)),
      activation};
  mlp.tp = tp;
  if (!weights.device().is_cpu() && can_stack_rows({mlp.gate, mlp.up})) {
    mlp.gate_up = stack_rows({mlp.gate, mlp.up});
    mlp.gate = mlp.up = Weight();
  }
  return mlp;
}

Tensor GatedMlp::forward(const Tensor& x) const {
  if (gate_up.defined()) {
    const Tensor y = project(ops::paired_gated_linear(x, gate_up, activation), down);
    tp.all_reduce(y);
    return y;
  }
  Tensor gate_out = project(x, gate);
  ops::gated_activation(activation, gate_out, project(x, up), gate_out);
  const Tensor y = project(gate_out, down);
  tp.all_reduce(y);
  return y;
}

SelfAttention::SelfAttention(WeightSource& weights, const std::string& prefix, int64_t hidden,
                             const LayerAttentionConfig& layer, const RopeParams& rope,
                             const SelfAttentionOptions& options, const TensorParallel& tp)
    : options_(options), tp_(tp), owns_kv_(layer.kv_source == KvSource::kOwn) {
  const HeadShard heads = shard_heads(layer, tp);
  attended_heads_ = heads.attended_count;
  params_.num_q_heads = heads.q_count;
  params_.num_kv_heads = heads.kv_count;
  params_.head_size_k = layer.head_size_k;
  params_.head_size_v = layer.head_size_v;
  params_.scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(layer.head_size_k)));
  params_.sliding_window = layer.sliding_window;
  // This rank's heads of a weight whose `dim` lists heads of `size` elements.
  const auto part = [&](int64_t dim, int64_t begin, int64_t count, int64_t size) {
    return tp.size == 1 ? WeightSlice{} : WeightSlice{dim, begin * size, count * size};
  };
  const int64_t hk = layer.head_size_k, hv = layer.head_size_v;
  q_proj_ = weights.get_weight(prefix + ".q_proj.weight", {layer.num_q_heads * hk, hidden},
                               part(0, heads.q_begin, heads.q_count, hk));
  o_proj_ = weights.get_weight(prefix + ".o_proj.weight", {hidden, layer.num_q_heads * hv},
                               part(1, heads.q_begin, heads.q_count, hv));
  if (options.qk_norm) {
    q_norm_ =
        RmsNorm::load(weights, prefix + ".q_norm.weight", layer.head_size_k, options.norm_eps);
  }
  if (owns_kv_) {
    // Scales must be finite and positive: K and V are stored divided by them.
    const auto read_scale = [&](const std::string& name) {
      const float value = weights.get_scalar(name);
      // Normal floats only: the cache is written times 1 / scale, which a subnormal overflows.
      if (!(std::isfinite(value) && value >= std::numeric_limits<float>::min())) {
        fail("KV cache scale '{}' is {}; it must be finite and positive, and not subnormal", name,
             value);
      }
      return value;
    };
    if (weights.has(prefix + ".kv_scale")) {
      params_.k_scale = params_.v_scale = read_scale(prefix + ".kv_scale");
    } else {
      if (weights.has(prefix + ".k_scale")) params_.k_scale = read_scale(prefix + ".k_scale");
      if (weights.has(prefix + ".v_scale")) params_.v_scale = read_scale(prefix + ".v_scale");
    }
    k_proj_ = weights.get_weight(prefix + ".k_proj.weight", {layer.num_kv_heads * hk, hidden},
                                 part(0, heads.kv_begin, heads.kv_count, hk));
    if (!options.k_eq_v) {
      v_proj_ = weights.get_weight(prefix + ".v_proj.weight", {layer.num_kv_heads * hv, hidden},
                                   part(0, heads.kv_begin, heads.kv_count, hv));
    }
    if (options.v_norm) v_norm_ = RmsNormParams{Tensor(), options.norm_eps, 0.0f};
    if (options.qk_norm) {
      k_norm_ =
          RmsNorm::load(weights, prefix + ".k_norm.weight", layer.head_size_k, options.norm_eps);
    }
  }
  // f32 values on the model's device, as the attention and RoPE kernels read them.
  auto on_device = [&](const std::vector<float>& values) {
    Tensor host = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kF32);
    std::copy(values.begin(), values.end(), host.data<float>());
    return weights.device().is_cpu() ? host : host.to(weights.device());
  };
  if (options.sinks) {
    const std::string name =
        prefix + (weights.has(prefix + ".sinks") ? ".sinks" : ".attention_sink_bias");
    // The heads this rank attends with; under DCP, only the DCP group's first rank adds them.
    sinks_ = on_device(cpu::to_floats(weights.get(
        name, {layer.num_q_heads}, part(0, heads.attended_begin, heads.attended_count, 1))));
  }
  inverse_frequencies_ = rope_inverse_frequencies(rope);
  rotary_dim_ = rope.rotary_dim;
  if (!weights.device().is_cpu()) {
    if (owns_kv_ && !options.k_eq_v && can_stack_rows({q_proj_, k_proj_, v_proj_})) {
      qkv_proj_ = stack_rows({q_proj_, k_proj_, v_proj_});
      q_proj_ = k_proj_ = v_proj_ = Weight();  // forward_fused reads the stack alone
    }
    device_frequencies_ = on_device(inverse_frequencies_);
  }
}

void SelfAttention::rotate(const Tensor& heads, const std::optional<RmsNorm>& norm,
                           const ForwardBatch& batch) const {
  if (norm) {
    ops::norm_rope(*norm, inverse_frequencies_, device_frequencies_, rotary_dim_, batch.positions,
                   batch.device_positions, heads);
  } else {
    ops::rope(inverse_frequencies_, device_frequencies_, rotary_dim_, batch.positions,
              batch.device_positions, heads);
  }
}

void SelfAttention::prepare_values(Tensor& v, const ForwardBatch& batch) const {
  if (options_.value_scale != 1.0f) {
    v = v.contiguous();
    ops::scale_in_place(v, options_.value_scale);
  }
  if (v_norm_) {
    // No rotation.
    ops::norm_rope(*v_norm_, {}, Tensor(), 0, batch.positions, batch.device_positions, v);
  }
}

Tensor SelfAttention::forward(const Tensor& x, const ForwardBatch& batch,
                              int64_t layer_index) const {
  const int64_t tokens = x.size(0);
  const AttentionLayerParams& p = params_;
  if (qkv_proj_.defined()) return forward_fused(x, batch, layer_index);
  const Tensor q = project(x, q_proj_).view({tokens, p.num_q_heads, p.head_size_k});
  rotate(q, q_norm_, batch);
  Tensor k;
  Tensor v;
  if (owns_kv_) {
    const Tensor k_raw = project(x, k_proj_);
    // With k_eq_v, V is the K projection before its norm and RoPE.
    v = (options_.k_eq_v ? k_raw.clone() : project(x, v_proj_))
            .view({tokens, p.num_kv_heads, p.head_size_v});
    prepare_values(v, batch);
    k = k_raw.view({tokens, p.num_kv_heads, p.head_size_k});
    rotate(k, k_norm_, batch);
  }
  return attend(x, q, k, v, batch, layer_index);
}

// One GEMM for q, k and v; strided views of its output feed the norms, RoPE and attention.
Tensor SelfAttention::forward_fused(const Tensor& x, const ForwardBatch& batch,
                                    int64_t layer_index) const {
  const int64_t tokens = x.size(0);
  const AttentionLayerParams& p = params_;
  const Tensor qkv = project(x, qkv_proj_);
  const int64_t row = qkv.size(1);
  const int64_t q_size = p.num_q_heads * p.head_size_k;
  const int64_t k_size = p.num_kv_heads * p.head_size_k;
  const Tensor q =
      qkv.as_strided({tokens, p.num_q_heads, p.head_size_k}, {row, p.head_size_k, 1}, 0);
  const Tensor k =
      qkv.as_strided({tokens, p.num_kv_heads, p.head_size_k}, {row, p.head_size_k, 1}, q_size);
  Tensor v = qkv.as_strided({tokens, p.num_kv_heads, p.head_size_v}, {row, p.head_size_v, 1},
                            q_size + k_size);
  if (q_norm_ && k_norm_ && options_.value_scale == 1.0f) {
    // q's and k's norms and rotations, and v's norm where it has one, in one pass.
    const NormRopePart parts[] = {
        {q, *q_norm_, true}, {k, *k_norm_, true}, {v, v_norm_.value_or(RmsNormParams{}), false}};
    ops::norm_rope(std::span(parts, v_norm_ ? 3 : 2), inverse_frequencies_, device_frequencies_,
                   rotary_dim_, batch.positions, batch.device_positions);
  } else {
    prepare_values(v, batch);
    if (q_norm_ || k_norm_) {
      rotate(q, q_norm_, batch);
      rotate(k, k_norm_, batch);
    } else {
      // q's heads and then k's lie side by side in each row: one rotation covers both.
      const Tensor qk = qkv.as_strided({tokens, p.num_q_heads + p.num_kv_heads, p.head_size_k},
                                       {row, p.head_size_k, 1}, 0);
      rotate(qk, std::nullopt, batch);
    }
  }
  return attend(x, q, k, v, batch, layer_index);
}

Tensor SelfAttention::attend(const Tensor& x, const Tensor& q, const Tensor& k, const Tensor& v,
                             const ForwardBatch& batch, int64_t layer_index) const {
  const AttentionLayerParams& p = params_;
  Tensor attended = ops::like(x, {x.size(0), p.num_q_heads * p.head_size_v});
  const LayerAttention& layer = batch.attention[layer_index];
  if (tp_.dcp.size > 1) {
    attend_context_parallel(q, k, v, *layer.plan, *layer.cache, attended);
  } else {
    AttentionLayerParams params = p;
    if (sinks_.defined()) params.sinks = sinks_.data<float>();
    layer.plan->forward(params, q, k, v, *layer.cache, attended);
  }
  const Tensor out = project(attended, o_proj_);
  tp_.all_reduce(out);
  return out;
}

void SelfAttention::attend_context_parallel(const Tensor& q, const Tensor& k, const Tensor& v,
                                            AttentionPlan& plan, const KvCacheView& cache,
                                            const Tensor& attended) const {
  const ContextParallel& dcp = tp_.dcp;
  const int64_t tokens = q.size(0);
  const int64_t own = params_.num_q_heads;
  const int64_t dk = params_.head_size_k;
  const int64_t dv = params_.head_size_v;
  // The DCP group's query heads: each rank's own, gathered in rank order, under TP.
  Tensor group_q = q;
  if (attended_heads_ != own) {
    const Tensor mine = q.contiguous();
    const Tensor gathered = ops::like(mine, {dcp.size * tokens, own, dk});
    dcp.comm->all_gather(mine, gathered);
    group_q = gathered.view({dcp.size, tokens, own, dk})
                  .permute({1, 0, 2, 3})
                  .contiguous()
                  .view({tokens, attended_heads_, dk});
  }
  AttentionLayerParams params = params_;
  params.num_q_heads = attended_heads_;
  if (sinks_.defined() && dcp.rank == 0) params.sinks = sinks_.data<float>();
  const Tensor part = ops::like(attended, {tokens, attended_heads_ * dv});
  const Tensor lse = Tensor::empty({tokens, attended_heads_}, DType::kF32, q.device());
  params.lse = lse.data<float>();
  plan.forward(params, group_q, k, v, cache, part);
  // Every rank's share of every sequence's keys, merged by their log-sum-exps.
  const Tensor parts = ops::like(part, {dcp.size * tokens, attended_heads_ * dv});
  const Tensor lses = Tensor::empty({dcp.size * tokens, attended_heads_}, DType::kF32, q.device());
  dcp.comm->all_gather(part, parts);
  dcp.comm->all_gather(lse, lses);
  merge_attention_parts(parts.view({dcp.size, tokens, attended_heads_, dv}),
                        lses.view({dcp.size, tokens, attended_heads_}),
                        attended_heads_ == own ? 0 : dcp.rank * own,
                        attended.view({tokens, own, dv}));
}

}  // namespace pagoda
