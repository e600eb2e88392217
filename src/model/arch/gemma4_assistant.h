// The Gemma 4 assistant: a small drafter whose every layer reads the target's KV caches.
#pragma once

#include <memory>

#include "model/arch/gemma4.h"

namespace pagoda {

struct DraftStep {
  Tensor logits;  // [rows, vocab]
  Tensor hidden;  // [rows, backbone_hidden]: fed back as the next step's hidden input
};

class Gemma4Assistant {
 public:
  // Under TP (`tp`), its layers split as the target's do, so each rank's shard reads its share of
  // the target's KV heads; the projections and the head stay whole.
  Gemma4Assistant(const ModelConfig& config, WeightSource& weights, const TensorParallel& tp = {});

  // One drafting step. token_embeddings: the target's scaled embeddings of the tokens to draft
  // after, [rows, backbone_hidden]; hidden: the target's final hidden state for the first step,
  // else the previous step's output, [rows, backbone_hidden]. The batch's layers are the
  // assistant's, viewing the target's caches; positions hold the draft position, and no K/V is
  // written.
  DraftStep step(const Tensor& token_embeddings, const Tensor& hidden,
                 const ForwardBatch& batch) const;
  // Its layer `layer` reads `target`'s layer `target_layer`'s cache, with that layer's cache
  // scales (an FP8 KV cache).
  void use_cache_scales_of(int64_t layer, const Gemma4Model& target, int64_t target_layer) {
    text_->use_cache_scales_of(layer, target, target_layer);
  }
  const Gemma4Model& text() const { return *text_; }
  // Whether a step waits for the device (an MoE block's routing), so it cannot be captured.
  bool synchronizes_with_host() const { return text_->synchronizes_with_host(); }

 private:
  std::unique_ptr<Gemma4Model> text_;
  Tensor pre_projection_;   // [hidden, 2 * backbone_hidden]
  Tensor post_projection_;  // [backbone_hidden, hidden]
  Tensor lm_head_;          // [vocab, hidden] (the assistant's embedding)
  // With ordered embeddings (use_ordered_embeddings), the centroid-masked head
  // (ops::centroid_masked_logits): only the tokens of the top centroids get their logit.
  Tensor centroids_;       // [num_centroids, hidden]
  Tensor token_ordering_;  // [vocab] int32, on the weights' device
  int64_t top_centroids_ = 0;
};

}  // namespace pagoda
