// GEMM micro-benchmark at the decode shapes of a Llama-3-8B layer (and its lm_head): bf16
// x[M, K] · weight[N, K]ᵀ through cuBLASLt and, for the rows they take, through our matrix-vector
// kernels (CUDA cores, tensor cores). Each is timed in a CUDA graph, as decode steps run it.
// Reports the median time and the weight bytes it streams over that time, against the
// device-to-device copy bandwidth measured here. Several weight copies rotate so the L2 cache never
// holds the one being read. A second table times FP8 weights against the bf16 ones.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_timing.h"
#include "core/cuda/context.h"
#include "ops/cuda/ops.h"

namespace pagoda {
namespace {

Tensor random_bf16(const Shape& shape, std::mt19937& rng) {
  Tensor host = Tensor::empty(shape, DType::kBF16);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (int64_t i = 0; i < host.numel(); ++i)
    host.data<uint16_t>()[i] = f32_to_bf16(dist(rng));
  return host.to(Device::cuda(0));
}

void run() {
  const Device gpu = Device::cuda(0);
  const double copy = bench::copy_bandwidth();
  fmt::print("device-to-device copy: {:.0f} GB/s (read + write)\n\n", copy / 1e9);
  struct Case {
    const char* name;
    int64_t n;
    int64_t k;
  };
  const Case cases[] = {{"qkv", 6144, 4096},
                        {"o_proj", 4096, 4096},
                        {"gate_up", 28672, 4096},
                        {"down", 4096, 14336},
                        {"lm_head", 128256, 4096}};
  std::mt19937 rng(3);
  fmt::print(
      "| GEMM | N x K | M | cuBLASLt µs | % of copy | gemv µs | % of copy | mma gemv µs | "
      "% of copy |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Case& c : cases) {
    const int64_t bytes = c.n * c.k * 2;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 2, 8));
    std::vector<Tensor> weights;
    for (int i = 0; i < copies; ++i)
      weights.push_back(random_bf16({c.n, c.k}, rng));
    for (int64_t m : {1, 2, 4, 5, 8, 16, 64}) {
      const Tensor x = random_bf16({m, c.k}, rng);
      const DType out_dtype = std::string(c.name) == "lm_head" ? DType::kF32 : DType::kBF16;
      const Tensor out = Tensor::empty({m, c.n}, out_dtype, gpu);
      // "- | -" where the kernel does not take this many rows.
      const auto columns = [&](bool applies, auto path) {
        if (!applies) return std::string("- | -");
        const double ms =
            bench::graph_median_ms(7, 20, [&](int i) { path(x, weights[i % copies], out); });
        return fmt::format("{:.1f} | {:.1f}%", ms * 1e3, 100.0 * bytes / (ms * 1e-3) / copy);
      };
      fmt::print("| {} | {} x {} | {} | {} | {} | {} |\n", c.name, c.n, c.k, m,
                 columns(true, cuda::cublaslt_linear),
                 columns(cuda::gemv_applies(x, weights[0], out), cuda::gemv),
                 columns(cuda::mma_gemv_applies(x, weights[0], out), cuda::mma_gemv));
    }
  }
  // The same shapes with FP8 weights in 128 x 128 blocks, each FP8 path alone: the matrix-vector
  // kernels up to kMaxFp8GemvRows rows, on CUDA cores and on tensor cores (bytes: a byte a weight
  // and the scales), the tensor-core GEMM
  // (x's quantization included) and the dequantized bf16 copy through cuBLASLt (the
  // dequantization included); then what linear() picks, against the faster bf16 path.
  fmt::print(
      "\nFP8 weights (128 x 128 blocks)\n\n"
      "| GEMM | N x K | M | gemv µs | % of copy | mma gemv µs | % of copy | fp8 GEMM µs | "
      "% of copy | dequantized µs | linear() ÷ best bf16 |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Case& c : cases) {
    const int64_t bytes = c.n * c.k + (c.n + 127) / 128 * ((c.k + 127) / 128) * 4;
    const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 2, 8));
    std::vector<Weight> weights;
    std::vector<Tensor> dense;
    for (int i = 0; i < copies; ++i) {
      const Tensor host = random_bf16({c.n, c.k}, rng).to(Device::cpu());
      weights.push_back(quantize_fp8(host, 128, 128).to(gpu));
      dense.push_back(host.to(gpu));
    }
    for (int64_t m : {1, 2, 4, 5, 8, 16, 64, 256}) {
      const Tensor x = random_bf16({m, c.k}, rng);
      const DType out_dtype = std::string(c.name) == "lm_head" ? DType::kF32 : DType::kBF16;
      const Tensor out = Tensor::empty({m, c.n}, out_dtype, gpu);
      const auto timed = [&](auto path) {
        return bench::graph_median_ms(7, 20, [&](int i) { path(x, weights[i % copies], out); });
      };
      const auto time_and_share = [&](double ms) {
        return fmt::format("{:.1f} | {:.1f}%", ms * 1e3, 100.0 * bytes / (ms * 1e-3) / copy);
      };
      const std::string gemv_columns =
          cuda::fp8_gemv_applies(x) ? time_and_share(timed(cuda::fp8_gemv)) : "- | -";
      const std::string mma_columns = cuda::fp8_mma_gemv_applies(x, weights[0])
                                          ? time_and_share(timed(cuda::fp8_mma_gemv))
                                          : "- | -";
      const std::string gemm_columns =
          cuda::fp8_gemm_applies(x, weights[0]) ? time_and_share(timed(cuda::fp8_gemm)) : "- | -";
      const double dequantized_ms = timed(cuda::fp8_dequantized_linear);
      const double ms =
          timed([](const Tensor& a, const Weight& w, const Tensor& o) { cuda::linear(a, w, o); });
      const double bf16_ms =
          bench::graph_median_ms(7, 20, [&](int i) { cuda::linear(x, dense[i % copies], out); });
      fmt::print("| {} | {} x {} | {} | {} | {} | {} | {:.1f} | {:.2f} |\n", c.name, c.n, c.k, m,
                 gemv_columns, mma_columns, gemm_columns, dequantized_ms * 1e3, ms / bf16_ms);
    }
  }
}

}  // namespace
}  // namespace pagoda

int main() {
  try {
    pagoda::run();
  } catch (const std::exception& error) {
    fmt::print(stderr, "linear_bench: {}\n", error.what());
    return 1;
  }
  return 0;
}
