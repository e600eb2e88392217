// FlashInfer's samplers over rows of f32 logits, for timing beside cuda::sample in one process
// (bench/sampling_bench.cc; built when PAGODA_FLASHINFER_DIR is set). No FlashInfer type appears
// here: only bench/flashinfer_sampling_peer.cu includes its headers.
//
// FlashInfer samples from probabilities: its online softmax at the row's temperature first, then
// one kernel for the filters (rejection sampling over pivots, drawing with its own Philox stream):
// top-k and top-p together, either alone, min-p alone, or none. Its draws follow the same
// distribution as pagoda's but are not the host sampler's tokens.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace pagoda::bench {

struct FlashInferSamplingCase {
  float temperature = 1.0f;  // > 0
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t top_k = 0;
};

// Whether FlashInfer has one sampler for the case's filters (min-p beside another: none).
bool flashinfer_samples(const FlashInferSamplingCase& c);

class FlashInferSampler {
 public:
  // logits: [rows, vocab] f32 on the device, kept for run().
  explicit FlashInferSampler(const Tensor& logits);
  // Queues on cuda::stream() the softmax and the case's sampler, each row's token into ids().
  // Throws Error where flashinfer_samples(c) is false.
  void run(const FlashInferSamplingCase& c);
  const Tensor& ids() const { return ids_; }

 private:
  Tensor logits_;
  Tensor probs_;      // [rows, vocab] f32
  Tensor ids_;        // [rows] int32
  Tensor valid_;      // [rows] bool
  Tensor workspace_;  // the softmax's partial results
  uint64_t offset_ = 0;
};

}  // namespace pagoda::bench
