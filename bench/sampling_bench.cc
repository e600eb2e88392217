// Sampling on the GPU (cuda::sample, what a decode step runs after its logits): the time of one
// call per step shape, greedy and with the usual filters, at batch 1 to 64 over Llama-3's and
// Gemma's vocabularies. Logits are normal with a few tokens raised well above the rest, as a
// language model's tend to be; each row has its own draw. Each call uploads its rows' parameters
// and runs eagerly, as the engine calls it after a step's graph.
//
// Built with PAGODA_FLASHINFER_DIR, FlashInfer's samplers (its softmax, then one sampling kernel;
// bench/flashinfer_sampling_peer.h) are timed beside it on the same logits, where FlashInfer has a
// sampler for the case's filters.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <random>
#include <vector>

#include "bench/cuda_timing.h"
#include "core/cuda/context.h"
#include "ops/cuda/ops.h"
#include "ops/sampling_row.h"

#if PAGODA_WITH_FLASHINFER
#include <string>

#include "bench/flashinfer_sampling_peer.h"
#endif

namespace pagoda {
namespace {

Tensor make_logits(int64_t rows, int64_t vocab, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  Tensor host = Tensor::empty({rows, vocab}, DType::kF32);
  float* logits = host.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i)
      logits[r * vocab + i] = normal(rng);
    // A head of likely tokens: a few logits 6-14 above the bulk.
    for (int i = 0; i < 16; ++i)
      logits[r * vocab + token(rng)] = 6.0f + 0.5f * static_cast<float>(i);
  }
  return host.to(Device::cuda(0));
}

void run() {
  struct Case {
    const char* name;
    SamplingRow row;
  };
  const Case cases[] = {
      {"greedy", {.temperature = 0.0}},
      {"temperature 1", {.temperature = 1.0}},
      {"T 0.8, top-p 0.95", {.temperature = 0.8, .top_p = 0.95}},
      {"T 0.7, top-k 50", {.temperature = 0.7, .top_k = 50}},
      {"T 1, min-p 0.05", {.temperature = 1.0, .min_p = 0.05}},
      {"T 0.8, top-k 40, top-p 0.95", {.temperature = 0.8, .top_p = 0.95, .top_k = 40}},
      {"T 0.8, top-k 40, top-p 0.95, min-p 0.02",
       {.temperature = 0.8, .top_p = 0.95, .min_p = 0.02, .top_k = 40}},
  };
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
#if PAGODA_WITH_FLASHINFER
  fmt::print(
      "| vocab | batch | sampling | µs per call | FlashInfer µs |\n|---:|---:|---|---:|---:|\n");
#else
  fmt::print("| vocab | batch | sampling | µs per call |\n|---:|---:|---|---:|\n");
#endif
  for (int64_t vocab : {128256, 262144}) {
    for (int64_t batch : {1, 16, 64}) {
      const Tensor logits = make_logits(batch, vocab, rng);
      const Tensor ids = Tensor::empty({batch}, DType::kI32, Device::cuda(0));
      const Tensor logprobs = Tensor::empty({batch}, DType::kF32, Device::cuda(0));
#if PAGODA_WITH_FLASHINFER
      bench::FlashInferSampler flashinfer(logits);
#endif
      for (const Case& c : cases) {
        std::vector<SamplingRow> rows(batch, c.row);
        for (SamplingRow& row : rows)
          row.uniform = uniform(rng);
        const double ms = bench::median_ms(
            20, 10, [&](int) { cuda::sample(logits, rows, ids, logprobs, Tensor(), Tensor()); });
#if PAGODA_WITH_FLASHINFER
        const bench::FlashInferSamplingCase peer{
            static_cast<float>(c.row.temperature), static_cast<float>(c.row.top_p),
            static_cast<float>(c.row.min_p), static_cast<int32_t>(c.row.top_k)};
        std::string peer_us = "—";
        if (c.row.temperature > 0.0 && bench::flashinfer_samples(peer)) {
          flashinfer.run(peer);
          const Tensor drawn = flashinfer.ids().to(Device::cpu());
          for (int64_t r = 0; r < batch; ++r) {
            const int32_t id = drawn.data<int32_t>()[r];
            PAGODA_CHECK(id >= 0 && id < vocab, "FlashInfer drew token {} of {}", id, vocab);
          }
          peer_us = fmt::format("{:.1f}",
                                bench::median_ms(20, 10, [&](int) { flashinfer.run(peer); }) * 1e3);
        }
        fmt::print("| {} | {} | {} | {:.1f} | {} |\n", vocab, batch, c.name, ms * 1e3, peer_us);
#else
        fmt::print("| {} | {} | {} | {:.1f} |\n", vocab, batch, c.name, ms * 1e3);
#endif
      }
    }
  }
}

}  // namespace
}  // namespace pagoda

int main() {
  try {
    pagoda::run();
  } catch (const std::exception& error) {
    fmt::print(stderr, "sampling_bench: {}\n", error.what());
    return 1;
  }
  return 0;
}
