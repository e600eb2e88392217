// The Llama decoder, which Qwen3 reuses with per-head q/k norms.
#pragma once

#include <memory>
#include <vector>

#include "model/config_reader.h"
#include "model/layers/blocks.h"

namespace pagoda {

class LlamaModel : public CausalLm {
 public:
  // This rank's shard under `tp`.
  LlamaModel(const ModelConfig& config, WeightSource& weights,
             const SelfAttentionOptions& attention_options, const TensorParallel& tp = {});
  Tensor forward(const ForwardBatch& batch) override;
  Tensor compute_logits(const Tensor& hidden) override;

 private:
  struct Layer {
    RmsNorm input_norm;
    std::unique_ptr<SelfAttention> attention;
    RmsNorm post_attention_norm;
    GatedMlp mlp;
  };
  Tensor embed_tokens_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  RmsNorm norm_;
  Tensor lm_head_;  // [vocab, hidden]; the embedding when tied
};

std::unique_ptr<CausalLm> build_llama(const ModelConfig& config, WeightSource& weights,
                                      const TensorParallel& tp);
std::unique_ptr<CausalLm> build_qwen3(const ModelConfig& config, WeightSource& weights,
                                      const TensorParallel& tp);

// hidden_act of a Llama-style config: "silu" or a tanh GELU. Throws Error for others.
cpu::Activation read_gated_activation(const ConfigReader& text);

}  // namespace pagoda
