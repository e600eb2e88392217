// MiMo-V2-Flash decoder.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "model/config_reader.h"
#include "model/layers/blocks.h"

namespace pagoda {

class MiMoV2FlashModel : public CausalLm {
 public:
  // `tp`: one tensor-parallel rank (whole weights), which may be a decode-context-parallel one.
  MiMoV2FlashModel(const ModelConfig& config, WeightSource& weights, const TensorParallel& tp = {});
  Tensor forward(const ForwardBatch& batch) override;
  Tensor compute_logits(const Tensor& hidden) override;
  bool synchronizes_with_host() const override;

 private:
  struct Expert {
    Weight gate;  // [inner, hidden]
    Weight up;    // [inner, hidden]
    Weight down;  // [hidden, inner]
  };
  struct Moe {
    Tensor router;                // [experts, hidden]
    std::vector<float> bias;      // [experts] e_score_correction_bias, for selection only
    std::vector<Expert> experts;  // this rank's, from first_expert on
    int64_t first_expert = 0;
    TensorParallel tp;
    int64_t top_k = 0;
    int64_t num_groups = 1;
    int64_t top_groups = 1;
    bool normalize = true;
    float routed_scale = 1.0f;
  };
  struct Layer {
    RmsNorm input_norm;
    std::unique_ptr<SelfAttention> attention;
    RmsNorm post_attention_norm;
    std::optional<GatedMlp> mlp;  // dense layers
    std::optional<Moe> moe;       // sparse layers
  };

  static Moe load_moe(WeightSource& weights, const ConfigReader& text, const std::string& prefix,
                      int64_t hidden, const TensorParallel& tp);
  // x: the normed input [T, hidden] -> [T, hidden].
  static Tensor run_moe(const Moe& moe, const Tensor& x);

  Tensor embed_tokens_;  // [vocab, hidden]
  std::vector<Layer> layers_;
  RmsNorm norm_;
  Tensor lm_head_;  // [vocab, hidden]
};

std::unique_ptr<CausalLm> build_mimo_v2_flash(const ModelConfig& config, WeightSource& weights,
                                              const TensorParallel& tp);

}  // namespace pagoda
