// Gemma 4 text decoder.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/config_reader.h"
#include "model/layers/blocks.h"

namespace pagoda {

class Gemma4Model : public CausalLm {
 public:
  // This rank's shard under `tp`: attention heads and MLP columns split; the per-layer inputs,
  // norms and the tied head whole on every rank.
  Gemma4Model(const ModelConfig& config, WeightSource& weights, const TensorParallel& tp = {});
  Tensor forward(const ForwardBatch& batch) override;
  Tensor compute_logits(const Tensor& hidden) override;
  bool synchronizes_with_host() const override;

  const Tensor& output_embedding() const { return embed_tokens_; }  // [vocab, hidden], tied head
  // Token embeddings scaled by sqrt(hidden), rounded to the weight dtype: [T, hidden]. A model on
  // a GPU reads `device_ids` ([T] int32 there).
  Tensor embed(const std::vector<int32_t>& ids, const Tensor& device_ids = Tensor()) const;
  // The decoder layers and the final norm from input embeddings [T, hidden]; per_layer_inputs is
  // undefined for a model without them. Returns the final hidden states [T, hidden].
  Tensor run_layers(const Tensor& input, const Tensor& per_layer_inputs,
                    const ForwardBatch& batch) const;
  // For a drafter whose layers read the target's caches: layer `layer` reads with the cache
  // scales of `target`'s layer `target_layer`, whose cache the KV plan has it read.
  void use_cache_scales_of(int64_t layer, const Gemma4Model& target, int64_t target_layer);
  // Layer `layer`'s cache scales (K's, V's).
  std::pair<float, float> cache_scales(int64_t layer) const {
    return layers_.at(layer).attention->cache_scales();
  }

 private:
  struct Moe {
    Tensor router;                        // [experts, hidden]
    std::vector<float> router_scale;      // [hidden]
    std::vector<float> per_expert_scale;  // [experts]
    // This rank's experts, [first_expert, first_expert + held) of all of them.
    Tensor gate_up;  // [held, 2 * inner, hidden]: gate rows, then up rows
    Tensor down;     // [held, hidden, inner]
    int64_t first_expert = 0;
    TensorParallel tp;
    RmsNorm pre_norm;
    RmsNorm post_mlp_norm;
    RmsNorm post_experts_norm;
    int64_t top_k = 0;
    float eps = 1e-6f;
    Tensor router_norm_weight;  // [hidden] router_scale * hidden^-0.5, for a model on a GPU
  };
  struct Layer {
    RmsNorm input_norm;
    std::unique_ptr<SelfAttention> attention;
    RmsNorm post_attention_norm;
    RmsNorm pre_feedforward_norm;
    RmsNorm post_feedforward_norm;
    GatedMlp mlp;
    float layer_scalar = 1.0f;
    std::optional<Moe> moe;
    Tensor ple_gate;        // [P, hidden]
    Tensor ple_projection;  // [hidden, P]
    RmsNorm ple_norm;
  };

  static Moe load_moe(WeightSource& weights, const ConfigReader& text, const std::string& layer,
                      int64_t hidden, float eps, const TensorParallel& tp);
  Tensor run_moe(const Moe& moe, const Tensor& residual) const;
  // [T, layers * P]: per-layer inputs, layer i in columns [i * P, (i + 1) * P).
  Tensor per_layer_inputs(const std::vector<int32_t>& ids, const Tensor& device_ids,
                          const Tensor& x0) const;

  Tensor embed_tokens_;  // [vocab, hidden]; also the output projection
  float embed_scale_ = 1.0f;
  int64_t ple_size_ = 0;
  Tensor ple_table_;  // [max(ple_vocab, vocab), layers * P]
  float ple_scale_ = 1.0f;
  Tensor ple_projection_;  // [layers * P, hidden]
  RmsNorm ple_norm_;
  std::vector<Layer> layers_;
  RmsNorm norm_;
  float softcap_ = 0.0f;
};

std::unique_ptr<CausalLm> build_gemma4(const ModelConfig& config, WeightSource& weights,
                                       const TensorParallel& tp);

}  // namespace pagoda
