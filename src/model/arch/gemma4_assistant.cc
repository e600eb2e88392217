// Gemma4AssistantForCausalLM. Input: the target's scaled token embedding concatenated with a hidden
// state, through pre_projection; then Gemma 4 decoder layers that compute q only and attend over
// the target's last full and sliding caches with a bidirectional mask (every full entry; the last
// window + 1 sliding entries); the final norm; post_projection gives the next hidden state and the
// tied head (optionally centroid-masked) gives logits. No softcap.
#include "model/arch/gemma4_assistant.h"

#include <algorithm>
#include <limits>

#include "ops/cpu/ops.h"

namespace pagoda {

Gemma4Assistant::Gemma4Assistant(const ModelConfig& config, WeightSource& weights) {
  const ConfigReader outer(config.file_config, config.source);
  // A query at the draft position sees window + 1 of the target's sliding entries; the kernel
  // places the query on the newest cached token, so the window grows by one.
  ModelConfig inner = config;
  for (LayerAttentionConfig& layer : inner.layers) {
    if (layer.kind == AttentionKind::kSliding) layer.sliding_window += 1;
  }
  text_ = std::make_unique<Gemma4Model>(inner, weights);
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
    centroids_ = weights.get("masked_embedding.centroids.weight", {centroids, hidden});
    token_ordering_ = weights.get_int64("masked_embedding.token_ordering", {config.vocab_size});
    for (const int64_t id : token_ordering_) {
      if (id < 0 || id >= config.vocab_size) {
        fail("{}: token_ordering holds {}, outside the vocabulary", config.source, id);
      }
    }
    top_centroids_ = std::min(outer.positive_or("centroid_intermediate_top_k", 32), centroids);
  }
}

DraftStep Gemma4Assistant::step(const Tensor& token_embeddings, const Tensor& hidden,
                                const ForwardBatch& batch) const {
  const int64_t rows = hidden.size(0);
  const int64_t backbone = hidden.size(1);
  Tensor input = Tensor::empty({rows, 2 * backbone}, DType::kF32);
  input.narrow(1, 0, backbone).copy_from(token_embeddings);
  input.narrow(1, backbone, backbone).copy_from(hidden);
  const Tensor x = project(input, pre_projection_);
  const Tensor h = text_->run_layers(x, Tensor(), batch);
  DraftStep out;
  out.hidden = project(h, post_projection_);
  out.logits = centroids_.defined()
                   ? ordered_logits(h, lm_head_, centroids_, token_ordering_, top_centroids_)
                   : project(h, lm_head_);
  return out;
}

Tensor Gemma4Assistant::ordered_logits(const Tensor& hidden, const Tensor& lm_head,
                                       const Tensor& centroids,
                                       const std::vector<int64_t>& token_ordering,
                                       int64_t top_centroids) {
  const int64_t rows = hidden.size(0);
  const int64_t vocab = lm_head.size(0);
  const int64_t num_centroids = centroids.size(0);
  const int64_t per_centroid = vocab / num_centroids;
  const Tensor scores = project(hidden, centroids);
  // The selected tokens of every row, and their logits.
  std::vector<std::vector<int64_t>> selected(rows);
  std::vector<std::vector<float>> values(rows);
  float smallest = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores.data<float>() + r * num_centroids;
    std::vector<int64_t> order(num_centroids);
    for (int64_t c = 0; c < num_centroids; ++c)
      order[c] = c;
    std::partial_sort(
        order.begin(), order.begin() + top_centroids, order.end(),
        [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    Tensor h = hidden.narrow(0, r, 1).contiguous();
    for (int64_t k = 0; k < top_centroids; ++k) {
      for (int64_t j = 0; j < per_centroid; ++j) {
        const int64_t token = token_ordering[order[k] * per_centroid + j];
        const Tensor logit = project(h, lm_head.narrow(0, token, 1));
        selected[r].push_back(token);
        values[r].push_back(logit.data<float>()[0]);
        smallest = std::min(smallest, values[r].back());
      }
    }
  }
  Tensor logits = Tensor::empty({rows, vocab}, DType::kF32);
  logits.fill(smallest - 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < selected[r].size(); ++i) {
      logits.data<float>()[r * vocab + selected[r][i]] = values[r][i];
    }
  }
  return logits;
}

}  // namespace pagoda
