#include <flashinfer/sampling.cuh>

#include "bench/flashinfer_sampling_peer.h"
#include "core/cuda/context.h"

namespace pagoda::bench {
namespace {

constexpr uint64_t kSeed = 1234;
// Each run moves FlashInfer's Philox offset on by this much, so successive runs draw afresh.
constexpr uint64_t kOffsetStep = 32;
// The softmax's partial results at small batch: rows x ceil(vocab / 8192) of 8 bytes each, far
// below this for the benchmark's shapes.
constexpr int64_t kWorkspaceBytes = int64_t{1} << 20;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("FlashInfer {}: {}", what, cudaGetErrorString(status));
}

}  // namespace

bool flashinfer_samples(const FlashInferSamplingCase& c) {
  return c.min_p <= 0.0f || (c.top_k <= 0 && c.top_p >= 1.0f);
}

FlashInferSampler::FlashInferSampler(const Tensor& logits) : logits_(logits) {
  PAGODA_CHECK(logits.dim() == 2 && logits.dtype() == DType::kF32 && logits.is_contiguous() &&
                   !logits.device().is_cpu(),
               "FlashInfer sampling takes contiguous [rows, vocab] f32 logits on a GPU; got {}",
               logits.shape());
  const Device device = logits.device();
  probs_ = Tensor::empty(logits.shape(), DType::kF32, device);
  ids_ = Tensor::empty({logits.size(0)}, DType::kI32, device);
  valid_ = Tensor::empty({logits.size(0)}, DType::kU8, device);
  workspace_ = Tensor::empty({kWorkspaceBytes}, DType::kU8, device);
}

void FlashInferSampler::run(const FlashInferSamplingCase& c) {
  PAGODA_CHECK(flashinfer_samples(c), "FlashInfer has no sampler for min-p beside other filters");
  namespace sampling = flashinfer::sampling;
  const auto rows = static_cast<uint32_t>(logits_.size(0));
  const auto vocab = static_cast<uint32_t>(logits_.size(1));
  auto* logits = const_cast<float*>(logits_.data<float>());
  float* probs = probs_.data<float>();
  int32_t* ids = ids_.data<int32_t>();
  auto* valid = reinterpret_cast<bool*>(valid_.raw_data());
  const cudaStream_t s = cuda::stream();
  check(sampling::OnlineSoftmax<float>(logits, probs, rows, vocab, nullptr, c.temperature,
                                       workspace_.raw_data(), kWorkspaceBytes, true, s),
        "softmax");
  const uint64_t offset = offset_;
  offset_ += kOffsetStep;
  const bool top_k = c.top_k > 0;
  const bool top_p = c.top_p < 1.0f;
  cudaError_t status;
  if (top_k && top_p) {
    status = sampling::TopKTopPSamplingFromProb<float, int32_t>(
        probs, nullptr, nullptr, ids, valid, nullptr, rows, c.top_k, c.top_p, vocab, true, nullptr,
        kSeed, nullptr, offset, s);
  } else if (top_k) {
    status = sampling::TopKSamplingFromProb<float, int32_t>(
        probs, ids, valid, nullptr, nullptr, rows, static_cast<uint32_t>(c.top_k), vocab, true,
        nullptr, kSeed, nullptr, offset, s);
  } else if (top_p) {
    status = sampling::TopPSamplingFromProb<float, int32_t>(probs, ids, valid, nullptr, nullptr,
                                                            rows, c.top_p, vocab, true, nullptr,
                                                            kSeed, nullptr, offset, s);
  } else if (c.min_p > 0.0f) {
    status = sampling::MinPSamplingFromProb<float, int32_t>(probs, nullptr, ids, valid, nullptr,
                                                            rows, c.min_p, vocab, true, nullptr,
                                                            kSeed, nullptr, offset, s);
  } else {
    status = sampling::SamplingFromProb<float, int32_t>(probs, ids, valid, nullptr, rows, vocab,
                                                        true, nullptr, kSeed, nullptr, offset, s);
  }
  check(status, "sampling");
}

}  // namespace pagoda::bench
