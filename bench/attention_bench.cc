// Decode attention micro-benchmark: bf16 queries, 32 query / 8 KV heads, head size 128, one query
// token per sequence, pages of 16 tokens, NHD. For each batch size and context length it times the
// CUDA kernel over the cache (no K/V write), captured in a CUDA graph as decode steps run it, and
// reports the bytes of K and V it must read over the time, against the device-to-device copy
// bandwidth measured in the same run. Pages are bf16, plain or padded by a quarter page with a
// runtime block stride; a second table reads e4m3 pages (--kv-cache-dtype fp8) against bf16 ones.
// Inputs rotate over several disjoint block sets so the L2 cache does not serve repeated runs.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/cuda/device_metadata.h"
#include "attention/cuda/paged_attention.h"
#include "bench/cuda_timing.h"
#include "core/cuda/context.h"

namespace pagoda {
namespace {

constexpr int64_t kQHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kHead = 128;
constexpr int64_t kBlock = 16;
constexpr int64_t kPoolBytes = int64_t{40} << 30;

struct Result {
  double us = 0;
  double bandwidth = 0;
};

Result run_case(const Tensor& pool, DType dtype, PageOrder order, int64_t page_padding,
                int64_t batch, int64_t context, std::mt19937& rng) {
  const KvPageShape page{.block_size = kBlock,
                         .num_kv_heads = kKvHeads,
                         .head_size_k = kHead,
                         .head_size_v = kHead,
                         .dtype = dtype};
  const PagedAttentionBackend backend("cuda", order, {});
  const int64_t stride = page.page_bytes() + page_padding;
  const int64_t num_blocks = pool.numel() / stride;
  const KvCacheView cache =
      reshape_kv_cache(pool.narrow(0, 0, num_blocks * stride), backend, page, num_blocks,
                       PagePlacement{.offset_bytes = 0, .block_stride_bytes = stride});
  const int64_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t blocks_per_set = batch * blocks_per_seq;
  const int64_t sets = std::clamp<int64_t>(num_blocks / blocks_per_set, 1, 8);

  // Each set: its own shuffled blocks, so consecutive runs read different memory.
  std::vector<int32_t> blocks(sets * blocks_per_set);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<std::unique_ptr<cuda::DeviceMetadata>> plans;
  for (int64_t s = 0; s < sets; ++s) {
    AttentionMetadata meta;
    meta.num_actual_tokens = batch;
    meta.num_decode_seqs = batch;
    meta.num_decode_tokens = batch;
    meta.block_table = std::span<const int32_t>(blocks.data() + s * blocks_per_set, blocks_per_set);
    meta.block_table_stride = blocks_per_seq;
    for (int64_t b = 0; b < batch; ++b) {
      meta.query_start.push_back(b);
      meta.seq_lens.push_back(context);
      meta.block_table_rows.push_back(static_cast<int32_t>(b));
      meta.slot_mapping.push_back(-1);
    }
    meta.query_start.push_back(batch);
    auto plan = std::make_unique<cuda::DeviceMetadata>(batch, batch, blocks_per_seq, kBlock);
    plan->update(meta);
    plans.push_back(std::move(plan));
  }
  const Tensor query = Tensor::empty({batch, kQHeads, kHead}, DType::kBF16, Device::cuda(0));
  query.fill(0.01);
  const Tensor output = Tensor::empty({batch, kQHeads * kHead}, DType::kBF16, Device::cuda(0));
  const AttentionLayerParams params{.num_q_heads = kQHeads,
                                    .num_kv_heads = kKvHeads,
                                    .head_size_k = kHead,
                                    .head_size_v = kHead,
                                    .scale = 1.0f / std::sqrt(float{kHead})};
  Result result;
  const double ms = bench::graph_median_ms(7, 20, [&](int i) {
    cuda::paged_attention(params, query, Tensor(), Tensor(), cache, *plans[i % sets], output);
  });
  const double bytes = double(batch) * context * kKvHeads * kHead * 2 * dtype_size(dtype);
  result.us = ms * 1e3;
  result.bandwidth = bytes / (ms * 1e-3);
  return result;
}

// With no arguments: the whole table. With BATCH CONTEXT [hnd]: that one case (for a profiler).
void run(int argc, char** argv) {
  const double copy = bench::copy_bandwidth();
  fmt::print("device-to-device copy: {:.0f} GB/s (read + write)\n\n", copy / 1e9);
  const Tensor pool = Tensor::empty({kPoolBytes}, DType::kU8, Device::cuda(0));
  // The pool filled with small random values of `dtype`: no zeros, no NaN.
  const auto fill = [&](DType dtype) {
    const Tensor elements = pool.reinterpret(dtype);
    std::mt19937 rng(7);
    Tensor chunk = Tensor::empty({int64_t{1} << 20}, dtype);
    for (int64_t i = 0; i < chunk.numel(); ++i) {
      const float value = std::uniform_real_distribution<float>(-1, 1)(rng);
      if (dtype == DType::kBF16) {
        chunk.data<uint16_t>()[i] = f32_to_bf16(value);
      } else {
        chunk.data<uint8_t>()[i] = f32_to_e4m3(value);
      }
    }
    for (int64_t off = 0; off + chunk.numel() <= elements.numel(); off += chunk.numel())
      elements.narrow(0, off, chunk.numel()).copy_from(chunk);
  };
  fill(DType::kBF16);
  const int64_t page_bytes = kBlock * kKvHeads * kHead * 2 * 2;
  std::mt19937 rng(1);
  if (argc >= 3) {
    const PageOrder order =
        argc >= 4 && std::string(argv[3]) == "hnd" ? PageOrder::kHnd : PageOrder::kNhd;
    const DType dtype = argc >= 5 && std::string(argv[4]) == "fp8" ? DType::kF8E4M3 : DType::kBF16;
    if (dtype != DType::kBF16) fill(dtype);
    const Result r = run_case(pool, dtype, order, 0, std::stoll(argv[1]), std::stoll(argv[2]), rng);
    fmt::print("{} x {} {}: {:.1f} µs, {:.1f}% of copy\n", argv[1], argv[2], page_order_name(order),
               r.us, 100 * r.bandwidth / copy);
    return;
  }
  fmt::print(
      "| batch | context | µs | GB/s | % of copy | padded µs | % of copy | padding cost |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<double> bf16_us;
  for (int64_t batch : {1, 16, 64, 256}) {
    for (int64_t context : {512, 1024, 4096, 16384}) {
      const Result plain = run_case(pool, DType::kBF16, PageOrder::kNhd, 0, batch, context, rng);
      const Result padded =
          run_case(pool, DType::kBF16, PageOrder::kNhd, page_bytes / 4, batch, context, rng);
      bf16_us.push_back(plain.us);
      fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.1f}% | {:.1f} | {:.1f}% | {:+.1f}% |\n", batch,
                 context, plain.us, plain.bandwidth / 1e9, 100 * plain.bandwidth / copy, padded.us,
                 100 * padded.bandwidth / copy, 100 * (padded.us / plain.us - 1));
    }
  }
  // e4m3 pages: half the bytes of the bf16 table's, against its times.
  fill(DType::kF8E4M3);
  fmt::print("\ne4m3 pages (--kv-cache-dtype fp8), against the bf16 pages above:\n\n");
  fmt::print("| batch | context | µs | GB/s | % of copy | ÷ bf16 time |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  size_t cell = 0;
  for (int64_t batch : {1, 16, 64, 256}) {
    for (int64_t context : {512, 1024, 4096, 16384}) {
      const Result fp8 = run_case(pool, DType::kF8E4M3, PageOrder::kNhd, 0, batch, context, rng);
      fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.1f}% | {:.2f} |\n", batch, context, fp8.us,
                 fp8.bandwidth / 1e9, 100 * fp8.bandwidth / copy, fp8.us / bf16_us[cell++]);
    }
  }
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  try {
    pagoda::run(argc, argv);
  } catch (const std::exception& error) {
    fmt::print(stderr, "attention_bench: {}\n", error.what());
    return 1;
  }
  return 0;
}
