// Building blocks shared by the architectures: RMSNorm, gated MLP, and self-attention over the
// paged KV cache.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/tensor_parallel.h"
#include "ops/cpu/ops.h"
#include "ops/ops.h"
#include "ops/rope.h"

namespace pagoda {

struct RmsNorm : RmsNormParams {
  static RmsNorm load(WeightSource& weights, const std::string& name, int64_t dim, float eps,
                      float weight_offset = 0.0f);
  // Normalises rows of x [rows, dim] into out (may alias x).
  void apply(const Tensor& x, const Tensor& out) const;
  // residual += x, then normalises residual into out.
  void add_apply(const Tensor& residual, const Tensor& x, const Tensor& out) const;
};

// down(act(gate(x)) * up(x)). Under tensor parallelism each rank holds inner / size rows of gate
// and up and those columns of down, and the ranks' partial outputs are summed.
struct GatedMlp {
  Weight gate;  // [inner, hidden]; undefined once fused into gate_up
  Weight up;    // [inner, hidden]; the same
  Weight down;  // [hidden, inner]
  cpu::Activation activation = cpu::Activation::kSilu;
  Weight gate_up;  // [2 * inner, hidden]: gate then up in one GEMM, for a model on a GPU
  TensorParallel tp;

  // Reads <prefix>.gate_proj.weight, up_proj and down_proj (this rank's share of them).
  static GatedMlp load(WeightSource& weights, const std::string& prefix, int64_t hidden,
                       int64_t inner, cpu::Activation activation, const TensorParallel& tp = {});
  // x: [T, hidden] -> [T, hidden].
  Tensor forward(const Tensor& x) const;
};

struct SelfAttentionOptions {
  bool qk_norm = false;        // RMSNorm over each head's q and k before RoPE (Qwen3, Gemma 4)
  bool v_norm = false;         // RMSNorm without scale over each head's v (Gemma 4)
  bool k_eq_v = false;         // no v_proj: V is the raw K projection (Gemma 4 full layers)
  std::optional<float> scale;  // on q·k; default 1/sqrt(head_size_k)
  float value_scale = 1.0f;    // V is multiplied by this before the cache (MiMo)
  bool sinks = false;          // a learned per-head sink logit (<prefix>.attention_sink_bias)
  float norm_eps = 1e-6f;
};

// q/k/v projections, optional per-head norms, RoPE, paged attention and the output projection.
// A layer that reads another layer's cache (LayerAttentionConfig::kv_source) has no k/v weights:
// it computes q only and attends with no K/V. Under tensor parallelism each rank holds the heads
// shard_heads() gives it (their rows of q/k/v, their columns of o) and the ranks' partial outputs
// are summed.
class SelfAttention {
 public:
  // Reads <prefix>.{q,k,v,o}_proj.weight (and q_norm/k_norm), and where the checkpoint has them
  // the scales of an FP8 KV cache: <prefix>.k_scale and .v_scale, or one .kv_scale for both.
  // `layer` gives the model's heads and sizes.
  SelfAttention(WeightSource& weights, const std::string& prefix, int64_t hidden,
                const LayerAttentionConfig& layer, const RopeParams& rope,
                const SelfAttentionOptions& options, const TensorParallel& tp = {});

  // The scales its cache is read with: K's, V's.
  std::pair<float, float> cache_scales() const { return {params_.k_scale, params_.v_scale}; }
  // A layer that reads `source`'s cache reads it with `source`'s cache scales.
  void use_cache_scales_of(const SelfAttention& source) {
    params_.k_scale = source.params_.k_scale;
    params_.v_scale = source.params_.v_scale;
  }

  // x: [T, hidden] (normed). Returns [T, hidden]. Writes this layer's K/V to its cache.
  Tensor forward(const Tensor& x, const ForwardBatch& batch, int64_t layer_index) const;

 private:
  Tensor forward_fused(const Tensor& x, const ForwardBatch& batch, int64_t layer_index) const;
  // Normalises each head of q or k [T, heads, head_size] when the layer has that norm, and
  // rotates it.
  void rotate(const Tensor& heads, const std::optional<RmsNorm>& norm,
              const ForwardBatch& batch) const;
  // V's scale and norm, where the options ask for them (v may become a contiguous copy).
  void prepare_values(Tensor& v, const ForwardBatch& batch) const;
  // Attention of q/k/v over the layer's cache, then the output projection.
  Tensor attend(const Tensor& x, const Tensor& q, const Tensor& k, const Tensor& v,
                const ForwardBatch& batch, int64_t layer_index) const;
  // Under DCP: attention of the DCP group's query heads over this rank's share of the keys, merged
  // with the other ranks' shares into attended [T, own heads * Dv].
  void attend_context_parallel(const Tensor& q, const Tensor& k, const Tensor& v,
                               AttentionPlan& plan, const KvCacheView& cache,
                               const Tensor& attended) const;

  AttentionLayerParams params_;  // this rank's heads
  int64_t attended_heads_ = 0;   // the q heads its attention runs (shard_heads)
  SelfAttentionOptions options_;
  TensorParallel tp_;
  bool owns_kv_ = true;
  Weight q_proj_, k_proj_, v_proj_, o_proj_;  // q, k and v undefined once stacked in qkv_proj_
  Weight qkv_proj_;  // [q + k + v, hidden] on a GPU, for a layer with its own K and V (not K = V)
  std::optional<RmsNorm> q_norm_, k_norm_;
  std::optional<RmsNormParams> v_norm_;  // without a weight, with options_.v_norm
  Tensor sinks_;  // [attended_heads_] f32 on the model's device, when options_.sinks
  std::vector<float> inverse_frequencies_;
  int64_t rotary_dim_ = 0;
  Tensor device_frequencies_;  // [rotary_dim / 2] f32, for a model on a GPU
};

// A pre-norm decoder over the batch's tokens: hidden = embed(tokens); per layer, hidden +=
// layer.attention(input_norm(hidden)), then hidden += feed_forward(layer,
// post_attention_norm(hidden)). Each residual add is fused with the norm that follows it (the next
// layer's input norm, or final_norm). Returns final_norm(hidden). Layer has input_norm, attention
// (a SelfAttention pointer) and post_attention_norm.
template <typename Layer, typename FeedForward>
Tensor pre_norm_decoder(const ForwardBatch& batch, const Tensor& embed_tokens,
                        const std::vector<Layer>& layers, const RmsNorm& final_norm,
                        FeedForward&& feed_forward) {
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  const Device device = embed_tokens.device();
  const Tensor hidden =
      Tensor::uninitialized({tokens, embed_tokens.size(1)}, ops::activation_dtype(device), device);
  ops::embedding(embed_tokens, batch.token_ids, batch.device_token_ids, 1.0f, hidden);
  Tensor normed = ops::like(hidden, hidden.shape());
  if (layers.empty()) {
    final_norm.apply(hidden, normed);
    return normed;
  }
  layers.front().input_norm.apply(hidden, normed);
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    layer.post_attention_norm.add_apply(
        hidden, layer.attention->forward(normed, batch, static_cast<int64_t>(i)), normed);
    const RmsNorm& next = i + 1 < layers.size() ? layers[i + 1].input_norm : final_norm;
    next.add_apply(hidden, feed_forward(layer, normed), normed);
  }
  return normed;
}

// For each token, the experts routed to and their weights.
using ExpertChoices = std::vector<std::vector<std::pair<int64_t, float>>>;

// out[t] = Σ weight · expert(e, rows routed to e) over token t's choices of the experts this rank
// holds (e in [first, first + count)), summed in ascending expert order, then over the TP ranks.
// x: [T, hidden]; expert(e, rows [n, hidden]) returns [n, hidden].
Tensor mix_experts(const Tensor& x, const ExpertChoices& chosen, int64_t first, int64_t count,
                   const TensorParallel& tp,
                   const std::function<Tensor(int64_t, const Tensor&)>& expert);

// x · weightᵀ in x's dtype (ops::linear).
Tensor project(const Tensor& x, const Weight& weight);

}  // namespace pagoda
