// Qwen3: the Llama decoder with RMSNorm over each head's q and k before RoPE, and a head_dim
// independent of the hidden size.
#include "model/arch/llama.h"

namespace pagoda {

std::unique_ptr<CausalLm> build_qwen3(const ModelConfig& config, WeightSource& weights,
                                      const TensorParallel& tp) {
  return std::make_unique<LlamaModel>(config, weights, SelfAttentionOptions{.qk_norm = true}, tp);
}

}  // namespace pagoda
