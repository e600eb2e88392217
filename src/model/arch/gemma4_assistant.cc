// Gemma4AssistantForCausalLM. Input: the target's scaled token embedding concatenated with a hidden
// state, through pre_projection; then Gemma 4 decoder layers that compute q only and attend over
// the target's last full and sliding caches with a bidirectional mask (every full entry; the last
// window + 1 sliding entries); the final norm; post_projection gives the next hidden state and the
// tied head (optionally centroid-masked) gives logits. No softcap.
#include "model/arch/gemma4_assistant.h"

#include "ops/ops.h"

namespace pagoda {

Gemma4Assistant::Gemma4Assistant(const ModelConfig& config, WeightSource& weights,
                                 const TensorParallel& tp) {
  const ConfigReader outer(config.file_config, config.source);
  // A query at the draft position sees window + 1 of the target's sliding entries; the kernel
  // places the query on the newest cached token, so the window grows by one.
  ModelConfig inner = config;
  for (LayerAttentionConfig& layer : inner.layers) {
    if (layer.kind == AttentionKind::kSliding) layer.sliding_window += 1;
  }
  text_ = std::make_unique<Gemma4Model>(inner, weights, tp);
  const int64_t hidden = config.hidden_size;
  const int64_t backbone = outer.positive("backbone_hidden_size");
  pre_projection_ = weights.get("pre_projection.weight", {hidden, 2 * backbone});
  post_projection_ = weights.get("post_projection.weight", {backbone, hidden});
  lm_head_ = text_->output_embedding();
  if (outer.boolean_or("use_ordered_embeddings", false)) {
    const int64_t centroids = outer.positive("num_centroids");
    if (centroids < 1 || config.vocab_size % centroids != 0) {
      fail("{}: num_centroids {} does not divide the vocabulary of {}", config.source, centroids,
           config.vocab_size);
    }
    ops::check_centroid_head(centroids, hidden, lm_head_.device());
    centroids_ = weights.get("masked_embedding.centroids.weight", {centroids, hidden});
    const std::vector<int64_t> ordering =
        weights.get_int64("masked_embedding.token_ordering", {config.vocab_size});
    Tensor host = Tensor::empty({config.vocab_size}, DType::kI32);
    for (int64_t i = 0; i < config.vocab_size; ++i) {
      if (ordering[i] < 0 || ordering[i] >= config.vocab_size) {
        fail("{}: token_ordering holds {}, outside the vocabulary", config.source, ordering[i]);
      }
      host.data<int32_t>()[i] = static_cast<int32_t>(ordering[i]);
    }
    token_ordering_ = host.to(lm_head_.device());
    top_centroids_ = std::min(outer.positive_or("centroid_intermediate_top_k", 32), centroids);
  }
}

DraftStep Gemma4Assistant::step(const Tensor& token_embeddings, const Tensor& hidden,
                                const ForwardBatch& batch) const {
  const int64_t rows = hidden.size(0);
  const int64_t backbone = hidden.size(1);
  const Tensor input = ops::like(hidden, {rows, 2 * backbone});
  input.narrow(1, 0, backbone).copy_from(token_embeddings);
  input.narrow(1, backbone, backbone).copy_from(hidden);
  const Tensor x = project(input, pre_projection_);
  const Tensor h = text_->run_layers(x, Tensor(), batch);
  DraftStep out;
  out.hidden = project(h, post_projection_);
  out.logits = centroids_.defined() ? ops::centroid_masked_logits(
                                          h, lm_head_, ops::linear(h, centroids_, DType::kF32),
                                          token_ordering_, top_centroids_)
                                    : ops::linear(h, lm_head_, DType::kF32);
  return out;
}

}  // namespace pagoda
