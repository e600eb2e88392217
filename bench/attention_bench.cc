// Attention micro-benchmark: bf16 queries, 32 query / 8 KV heads, pages of 16 tokens, NHD.
//
// Decode (head size 128, one query token per sequence): for each batch size and context length it
// times the CUDA kernel over the cache (no K/V write), captured in a CUDA graph as decode steps run
// it, and reports the bytes of K and V it must read over the time, against the device-to-device
// copy bandwidth measured in the same run. Pages are bf16, plain or padded by a quarter page with a
// runtime block stride; a second table reads e4m3 pages (--kv-cache-dtype fp8) against bf16 ones.
// Inputs rotate over several disjoint block sets so the L2 cache does not serve repeated runs.
//
// Verify (head size 128): 1 to 8 query rows per sequence, as speculative decoding's verify steps
// attend, against one row.
//
// Prefill (head sizes 128, 256 and 512, Gemma 4's full layers): causal prompts of 512 to 32k
// tokens, about 32k tokens a batch, whose K/V are already in the pages, in TFLOP/s.
//
// Built with PAGODA_FLASHINFER_DIR, FlashInfer's kernels are timed beside pagoda's on the same
// pages and block sets (bench/flashinfer_peer.h), after a check that both compute the same.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/backend.h"
#include "attention/cuda/device_metadata.h"
#include "attention/cuda/paged_attention.h"
#include "bench/cuda_timing.h"
#include "core/cuda/context.h"
#if PAGODA_WITH_FLASHINFER
#include "bench/flashinfer_peer.h"
#endif

namespace pagoda {
namespace {

constexpr int64_t kQHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kHead = 128;
constexpr int64_t kBlock = 16;
constexpr int64_t kPoolBytes = int64_t{40} << 30;
// Prefill batches of about 32k tokens: (prompts, tokens a prompt).
constexpr std::array<std::pair<int64_t, int64_t>, 4> kPrefillBatches = {
    {{64, 512}, {16, 2048}, {4, 8192}, {1, 32768}}};
// The largest relative L2 distance between a peer's output rows and pagoda's that lets the peer
// be timed: two kernels' bf16 roundings stay far below it, a peer reading other pages or masking
// otherwise does not.
constexpr double kMaxPeerDistance = 2e-2;

// Which other library's kernels a case also times.
enum class Peer { kNone, kFlashInfer };

struct Result {
  double us = 0;
  double bandwidth = 0;
  double peer_us = 0;  // 0 where no peer was timed
  double peer_bandwidth = 0;
  double peer_distance = 0;  // the largest relative L2 distance of its output rows from pagoda's
};

// The benchmark's attention layer at head size `head` (K and V alike).
AttentionLayerParams layer_params(int64_t head) {
  return {.num_q_heads = kQHeads,
          .num_kv_heads = kKvHeads,
          .head_size_k = head,
          .head_size_v = head,
          .scale = 1.0f / std::sqrt(static_cast<float>(head))};
}

// Fills contiguous `t` (bf16 or e4m3) with values drawn uniformly from (-1, 1): no zeros, no NaN.
// One chunk of 2^20 draws repeats across it, which keeps filling 40 GiB quick.
void fill_random(const Tensor& t, uint32_t seed) {
  const Tensor elements = t.view({t.numel()});
  std::mt19937 rng(seed);
  const Tensor chunk =
      Tensor::empty({std::min<int64_t>(elements.numel(), int64_t{1} << 20)}, t.dtype());
  for (int64_t i = 0; i < chunk.numel(); ++i) {
    const float value = std::uniform_real_distribution<float>(-1, 1)(rng);
    if (t.dtype() == DType::kBF16) {
      chunk.data<uint16_t>()[i] = f32_to_bf16(value);
    } else {
      chunk.data<uint8_t>()[i] = f32_to_e4m3(value);
    }
  }
  for (int64_t off = 0; off < elements.numel(); off += chunk.numel()) {
    const int64_t n = std::min(chunk.numel(), elements.numel() - off);
    elements.narrow(0, off, n).copy_from(chunk.narrow(0, 0, n));
  }
}

// The largest relative L2 distance of `a`'s rows of `head` bf16 elements from `b`'s.
double relative_distance(const Tensor& a_device, const Tensor& b_device, int64_t head) {
  const Tensor a = a_device.to(Device::cpu());
  const Tensor b = b_device.to(Device::cpu());
  const uint16_t* a_bits = a.data<uint16_t>();
  const uint16_t* b_bits = b.data<uint16_t>();
  double worst = 0;
  for (int64_t row = 0; row < a.numel() / head; ++row) {
    double diff = 0;
    double norm = 0;
    for (int64_t i = row * head; i < (row + 1) * head; ++i) {
      const double x = bf16_to_f32(a_bits[i]);
      const double y = bf16_to_f32(b_bits[i]);
      diff += (x - y) * (x - y);
      norm += y * y;
    }
    const double distance = std::sqrt(diff / std::max(norm, 1e-30));
    if (std::isnan(distance)) return distance;
    worst = std::max(worst, distance);
  }
  return worst;
}

#if PAGODA_WITH_FLASHINFER
// FlashInfer's view of a pagoda cache and plan: the same pages, block tables and tensors.
bench::FlashInferBatch flashinfer_batch(const AttentionLayerParams& params,
                                        const KvCacheView& cache, const cuda::DeviceMetadata& plan,
                                        std::vector<int64_t> seq_lens, const Tensor& query,
                                        const Tensor& output) {
  // A page holds K of all its tokens, then V: the layout FlashInferBatch describes.
  const int64_t k_bytes = kBlock * params.num_kv_heads * params.head_size_k * 2;
  PAGODA_CHECK(
      cache.key.dtype() == DType::kBF16 && cache.value.raw_data() == cache.key.raw_data() + k_bytes,
      "FlashInfer reads bf16 NHD pages, V after K");
  return {.pool = cache.key.raw_data(),
          .page_elements = cache.block_stride,
          .block_size = kBlock,
          .num_q_heads = params.num_q_heads,
          .num_kv_heads = params.num_kv_heads,
          .head_size = params.head_size_k,
          .scale = params.scale,
          .block_table = plan.block_table(),
          .block_table_stride = plan.block_table_stride(),
          .seq_lens = std::move(seq_lens),
          .query = query,
          .output = output};
}

// The largest relative L2 distance of FlashInfer's output rows (one per token and head) from
// pagoda's. Throws Error past kMaxPeerDistance: timing a peer that computes something else would
// mislead.
double checked_distance(const Tensor& peer, const Tensor& reference, int64_t head,
                        const std::string& what) {
  const double distance = relative_distance(peer, reference, head);
  if (!(distance <= kMaxPeerDistance)) {
    fail(
        "FlashInfer's output for {} differs from pagoda's by {:.3g} (relative L2); the limit is "
        "{}",
        what, distance, kMaxPeerDistance);
  }
  return distance;
}
#endif

// `rows` query tokens per sequence (a token and its drafts, as a verify step has), the last at
// position context - 1; `fixed_splits` as a CUDA graph's plan fixes them (0: chosen per call).
Result run_case(const Tensor& pool, DType dtype, PageOrder order, int64_t page_padding,
                int64_t batch, int64_t context, Peer peer, std::mt19937& rng, int64_t rows = 1,
                int64_t fixed_splits = 0) {
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
    meta.num_actual_tokens = batch * rows;
    meta.num_decode_seqs = batch;
    meta.num_decode_tokens = batch * rows;
    meta.block_table = std::span<const int32_t>(blocks.data() + s * blocks_per_set, blocks_per_set);
    meta.block_table_stride = blocks_per_seq;
    for (int64_t b = 0; b < batch; ++b) {
      meta.query_start.push_back(b * rows);
      meta.seq_lens.push_back(context);
      meta.block_table_rows.push_back(static_cast<int32_t>(b));
    }
    meta.slot_mapping.assign(batch * rows, -1);
    meta.query_start.push_back(batch * rows);
    auto plan = std::make_unique<cuda::DeviceMetadata>(batch, batch * rows, blocks_per_seq, kBlock);
    plan->fixed_decode_splits = fixed_splits;
    plan->update(meta);
    plans.push_back(std::move(plan));
  }
  const Tensor query = Tensor::empty({batch * rows, kQHeads, kHead}, DType::kBF16, Device::cuda(0));
  fill_random(query, 3);
  const Tensor output =
      Tensor::empty({batch * rows, kQHeads * kHead}, DType::kBF16, Device::cuda(0));
  const AttentionLayerParams params = layer_params(kHead);
  Result result;
  const double ms = bench::graph_median_ms(7, 20, [&](int i) {
    cuda::paged_attention(params, query, Tensor(), Tensor(), cache, *plans[i % sets], output);
  });
  const double bytes = double(batch) * context * kKvHeads * kHead * 2 * dtype_size(dtype);
  result.us = ms * 1e3;
  result.bandwidth = bytes / (ms * 1e-3);
#if PAGODA_WITH_FLASHINFER
  if (peer == Peer::kFlashInfer) {
    // One FlashInfer plan per block set, as pagoda has, each checked against pagoda's output.
    const Tensor peer_output = Tensor::empty(output.shape(), DType::kBF16, Device::cuda(0));
    std::vector<std::unique_ptr<bench::FlashInferAttention>> peers;
    for (int64_t s = 0; s < sets; ++s) {
      peers.push_back(bench::FlashInferAttention::decode(flashinfer_batch(
          params, cache, *plans[s], std::vector<int64_t>(batch, context), query, peer_output)));
      cuda::paged_attention(params, query, Tensor(), Tensor(), cache, *plans[s], output);
      peers[s]->run();
      result.peer_distance = std::max(
          result.peer_distance, checked_distance(peer_output, output, kHead,
                                                 fmt::format("batch {} x {}", batch, context)));
    }
    const double peer_ms = bench::graph_median_ms(7, 20, [&](int i) { peers[i % sets]->run(); });
    result.peer_us = peer_ms * 1e3;
    result.peer_bandwidth = bytes / (peer_ms * 1e-3);
  }
#endif
  return result;
}

struct PrefillResult {
  std::string refusal;  // why pagoda refused the shape; empty where it ran
  double us = 0;        // with the default CTAs
  double flops = 0;     // per second
  // Each of cuda::kPrefillCtasShapes (0 where the head has no such CTAs), and the largest relative
  // L2 distance of its rows from the first's.
  std::array<double, cuda::kPrefillCtasShapes.size()> shape_us{};
  std::array<double, cuda::kPrefillCtasShapes.size()> shape_distance{};
  double peer_us = 0;  // 0 where no peer was timed
  double peer_flops = 0;
  double peer_distance = 0;
};

// Causal prefill of `batch` prompts of `prompt` tokens after `cached` earlier ones (a chunk of a
// longer prompt), whose K/V are already in the pages (slot -1: the kernel over the cache, as a
// layer that shares another's KV runs it). One block set: a batch's K/V, 128 MiB or more, is far
// larger than the L2 cache.
PrefillResult run_prefill(const Tensor& pool, int64_t head, int64_t batch, int64_t prompt,
                          int64_t cached, Peer peer, std::mt19937& rng) {
  const KvPageShape page{.block_size = kBlock,
                         .num_kv_heads = kKvHeads,
                         .head_size_k = head,
                         .head_size_v = head,
                         .dtype = DType::kBF16};
  const PagedAttentionBackend backend("cuda", PageOrder::kNhd, {});
  const int64_t num_blocks = pool.numel() / page.page_bytes();
  const KvCacheView cache =
      reshape_kv_cache(pool.narrow(0, 0, num_blocks * page.page_bytes()), backend, page, num_blocks,
                       PagePlacement{.offset_bytes = 0, .block_stride_bytes = page.page_bytes()});
  const int64_t seq_len = cached + prompt;
  const int64_t blocks_per_seq = (seq_len + kBlock - 1) / kBlock;
  const int64_t tokens = batch * prompt;
  std::vector<int32_t> blocks(num_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  blocks.resize(batch * blocks_per_seq);

  AttentionMetadata meta;
  meta.num_actual_tokens = tokens;
  meta.block_table = blocks;
  meta.block_table_stride = blocks_per_seq;
  meta.query_start.push_back(0);
  for (int64_t b = 0; b < batch; ++b) {
    meta.query_start.push_back((b + 1) * prompt);
    meta.seq_lens.push_back(seq_len);
    meta.block_table_rows.push_back(static_cast<int32_t>(b));
  }
  meta.slot_mapping.assign(tokens, -1);
  cuda::DeviceMetadata plan(batch, tokens, blocks_per_seq, kBlock);
  plan.update(meta);
  const Tensor query = Tensor::empty({tokens, kQHeads, head}, DType::kBF16, Device::cuda(0));
  fill_random(query, 3);
  const Tensor output = Tensor::empty({tokens, kQHeads * head}, DType::kBF16, Device::cuda(0));
  const AttentionLayerParams params = layer_params(head);
  const auto attend = [&] {
    cuda::paged_attention(params, query, Tensor(), Tensor(), cache, plan, output);
  };
  // Query i of a prompt sees keys 0..cached + i: P C + P (P + 1) / 2 pairs, each 2 * head FLOP
  // for q·k and as many for p·v, in every query head.
  const double flops = 4.0 * batch * (prompt * cached + prompt * (prompt + 1) / 2) * kQHeads * head;

  PrefillResult result;
  // Once, eagerly: the output the peer is checked against. paged_attention's argument checks
  // refuse a shape it has no kernel for before launching anything.
  try {
    attend();
  } catch (const InternalError& error) {
    result.refusal = error.what();
  }
#if PAGODA_WITH_FLASHINFER
  if (peer == Peer::kFlashInfer) {
    const Tensor peer_output = Tensor::empty(output.shape(), DType::kBF16, Device::cuda(0));
    const std::unique_ptr<bench::FlashInferAttention> flashinfer =
        bench::FlashInferAttention::prefill(
            flashinfer_batch(params, cache, plan, meta.seq_lens, query, peer_output), prompt);
    flashinfer->run();
    if (result.refusal.empty()) {
      result.peer_distance = checked_distance(peer_output, output, head,
                                              fmt::format("{} x {} head {}", batch, prompt, head));
    }
    const double ms = bench::graph_median_ms(5, 4, [&](int) { flashinfer->run(); });
    result.peer_us = ms * 1e3;
    result.peer_flops = flops / (ms * 1e-3);
  }
#endif
  if (result.refusal.empty()) {
    const double ms = bench::graph_median_ms(5, 4, [&](int) { attend(); });
    result.us = ms * 1e3;
    result.flops = flops / (ms * 1e-3);
  }
  if (result.refusal.empty() && (head == 128 || head == 256)) {
    // Each CTA shape the head has, checked against the first shape's output.
    Tensor reference;
    for (size_t i = 0; i < cuda::kPrefillCtasShapes.size(); ++i) {
      if (!cuda::prefill_ctas_available(cuda::kPrefillCtasShapes[i], head, head, DType::kBF16))
        continue;
      plan.prefill_ctas = cuda::kPrefillCtasShapes[i];
      attend();
      if (i == 0) reference = output.to(Device::cpu());
      result.shape_distance[i] = relative_distance(output, reference, head);
      result.shape_us[i] = bench::graph_median_ms(5, 4, [&](int) { attend(); }) * 1e3;
    }
    plan.prefill_ctas = cuda::PrefillCtas::kDefault;
  }
  return result;
}

#if PAGODA_WITH_FLASHINFER
constexpr Peer kPeer = Peer::kFlashInfer;
#else
constexpr Peer kPeer = Peer::kNone;
#endif

// The decode table's FlashInfer cells of a row: time, share of copy bandwidth, pagoda's time over
// FlashInfer's and how far apart their outputs are; none without FlashInfer.
std::string decode_peer_cells(const Result& r, double copy) {
  if (r.peer_us == 0) return "";
  return fmt::format(" {:.1f} | {:.1f}% | {:.2f} | {:.1e} |", r.peer_us,
                     100 * r.peer_bandwidth / copy, r.us / r.peer_us, r.peer_distance);
}

void print_prefill_table(const Tensor& pool, std::mt19937& rng) {
  fmt::print("\ncausal prefill over cached K/V, about 32k tokens a batch:\n\n");
  std::string peer_header, peer_rule;
  if (kPeer == Peer::kFlashInfer) {
    fmt::print(
        "FlashInfer: its FA2 paged prefill kernel (BatchPrefillWithPagedKVCache), causal, on "
        "the same pages; max rel. diff as above.\n\n");
    peer_header = " FlashInfer µs | TFLOP/s | pagoda ÷ FlashInfer time | max rel. diff |";
    peer_rule = "---:|---:|---:|---:|";
  }
  fmt::print(
      "pagoda: its default CTAs for the head (default); then, for heads of 128 and 256, each CTA "
      "shape: 4 warps of 16 rows (4x16), 8 warps of 16 rows (8x16), 4 warps of 32 rows (4x32, "
      "head 128), two warpgroups of 64 rows on wgmma (wgmma, head 128 on sm_90a), the same over "
      "chunks of 128 keys with a third warpgroup copying for the two (wgmma+p), with the rel. "
      "diff of each from 4x16's output.\n\n");
  fmt::print(
      "| head | prompts | default | µs | TFLOP/s | 4x16 µs | 8x16 µs | rel. diff | 4x32 µs | "
      "rel. diff | wgmma µs | rel. diff | wgmma+p µs | rel. diff |{}\n",
      peer_header);
  fmt::print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|{}\n",
             peer_rule);
  std::vector<std::string> refusals;
  for (int64_t head : {128, 256, 512}) {
    for (const auto& [batch, prompt] : kPrefillBatches) {
      const PrefillResult r = run_prefill(pool, head, batch, prompt, 0, kPeer, rng);
      std::string cells = fmt::format(" {} |", cuda::prefill_ctas_name(cuda::prefill_ctas_for(
                                                   head, head, DType::kBF16, batch, kKvHeads,
                                                   prompt * (kQHeads / kKvHeads), prompt)));
      cells += r.refusal.empty() ? fmt::format(" {:.0f} | {:.0f} |", r.us, r.flops / 1e12)
                                 : fmt::format(" — ({}) | — |", refusals.size() + 1);
      for (size_t i = 0; i < cuda::kPrefillCtasShapes.size(); ++i) {
        cells += r.shape_us[i] > 0 ? fmt::format(" {:.0f} |", r.shape_us[i]) : " — |";
        if (i > 0) {
          cells += r.shape_us[i] > 0 ? fmt::format(" {:.1e} |", r.shape_distance[i]) : " — |";
        }
      }
      if (!r.refusal.empty()) refusals.push_back(r.refusal);
      if (r.peer_us > 0) {
        cells += fmt::format(" {:.0f} | {:.0f} | ", r.peer_us, r.peer_flops / 1e12);
        cells += r.refusal.empty()
                     ? fmt::format("{:.2f} | {:.1e} |", r.us / r.peer_us, r.peer_distance)
                     : "— | — |";
      }
      fmt::print("| {} | {} × {} |{}\n", head, batch, prompt, cells);
    }
  }
  for (size_t i = 0; i < refusals.size(); ++i)
    fmt::print("\n({}) pagoda refused the shape: {}\n", i + 1, refusals[i]);
}

// Verify steps: 1 to 8 query rows per sequence (a token and up to 7 drafts), each row with its
// 4 query heads of a KV head, so more than 4 rows need a second 16-row tile. Splits chosen for
// max_model_len 4096 and sequences × KV heads, against the one-row step; and, with two tiles,
// for sequences × KV heads × tiles (fewer, longer splits), as CUDA graphs now choose them.
void print_verify_table(const Tensor& pool, double copy, std::mt19937& rng) {
  fmt::print(
      "\nverify: query rows per sequence (1 + drafts), KV splits chosen for max_model_len 4096 "
      "and the (sequence, KV head) pairs alone, and with two row tiles also for pairs × tiles "
      "(as CUDA graphs choose them):\n\n");
  fmt::print(
      "| batch | context | rows | row tiles | splits for pairs | µs | ÷ 1 row | % of copy | "
      "splits for pairs × tiles | µs |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t batch : {1, 16}) {
    const int64_t splits = cuda::decode_splits_for(kHead, kHead, batch * kKvHeads, 4096);
    for (int64_t context : {576, 4096}) {
      double one_row = 0;
      for (int64_t rows = 1; rows <= 8; ++rows) {
        const int64_t tiles = (rows * kQHeads / kKvHeads + 15) / 16;
        const Result r = run_case(pool, DType::kBF16, PageOrder::kNhd, 0, batch, context,
                                  Peer::kNone, rng, rows, splits);
        if (rows == 1) one_row = r.us;
        // The alternative: splits chosen for the CTAs the row tiles make, fewer of them each.
        const int64_t tile_splits =
            cuda::decode_splits_for(kHead, kHead, batch * kKvHeads * tiles, 4096);
        const std::string alternative =
            tiles == 1 ? "- | -"
                       : fmt::format("{} | {:.1f}", tile_splits,
                                     run_case(pool, DType::kBF16, PageOrder::kNhd, 0, batch,
                                              context, Peer::kNone, rng, rows, tile_splits)
                                         .us);
        fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {:.2f} | {:.1f}% | {} |\n", batch, context,
                   rows, tiles, splits, r.us, r.us / one_row, 100 * r.bandwidth / copy,
                   alternative);
      }
    }
  }
}

// The bf16 decode table (plain pages, with the peer's columns, and pages padded by a quarter);
// returns the plain pages' times, cell by cell.
std::vector<double> print_decode_table(const Tensor& pool, double copy, std::mt19937& rng) {
  const int64_t page_bytes = kBlock * kKvHeads * kHead * 2 * 2;
  std::string peer_header, peer_rule;
  if (kPeer == Peer::kFlashInfer) {
    fmt::print(
        "FlashInfer: its tensor-core decode (the FA2 paged prefill kernel over one query "
        "row per sequence, as BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True) "
        "runs it) on the plain pages and block sets; max rel. diff: the largest relative "
        "L2 distance of its output rows from pagoda's.\n\n");
    peer_header = " FlashInfer µs | % of copy | pagoda ÷ FlashInfer time | max rel. diff |";
    peer_rule = "---:|---:|---:|---:|";
  }
  fmt::print(
      "| batch | context | µs | GB/s | % of copy | padded µs | % of copy | padding cost |{}\n",
      peer_header);
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|{}\n", peer_rule);
  std::vector<double> bf16_us;
  for (int64_t batch : {1, 16, 64, 256}) {
    for (int64_t context : {512, 1024, 4096, 16384}) {
      const Result plain =
          run_case(pool, DType::kBF16, PageOrder::kNhd, 0, batch, context, kPeer, rng);
      const Result padded = run_case(pool, DType::kBF16, PageOrder::kNhd, page_bytes / 4, batch,
                                     context, Peer::kNone, rng);
      bf16_us.push_back(plain.us);
      fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.1f}% | {:.1f} | {:.1f}% | {:+.1f}% |{}\n", batch,
                 context, plain.us, plain.bandwidth / 1e9, 100 * plain.bandwidth / copy, padded.us,
                 100 * padded.bandwidth / copy, 100 * (padded.us / plain.us - 1),
                 decode_peer_cells(plain, copy));
    }
  }
  return bf16_us;
}

// With no arguments: the tables. With BATCH CONTEXT [hnd] [fp8]: that one decode case, pagoda
// alone (for a profiler). With "decode", "verify" or "prefill": that table alone. With prefill HEAD
// BATCH PROMPT [CACHED]: that one prefill case (each prompt after CACHED tokens already in the
// cache), each CTA shape's time too (a quick comparison, or a profiler's).
void run(int argc, char** argv) {
  const double copy = bench::copy_bandwidth();
  fmt::print("device-to-device copy: {:.0f} GB/s (read + write)\n\n", copy / 1e9);
  const Tensor pool = Tensor::empty({kPoolBytes}, DType::kU8, Device::cuda(0));
  fill_random(pool.reinterpret(DType::kBF16), 7);
  std::mt19937 rng(1);
  if (argc == 2 && std::string(argv[1]) == "verify") {
    print_verify_table(pool, copy, rng);
    return;
  }
  if (argc == 2 && std::string(argv[1]) == "prefill") {
    print_prefill_table(pool, rng);
    return;
  }
  if ((argc == 5 || argc == 6) && std::string(argv[1]) == "prefill") {
    const int64_t cached = argc == 6 ? std::stoll(argv[5]) : 0;
    const PrefillResult r = run_prefill(pool, std::stoll(argv[2]), std::stoll(argv[3]),
                                        std::stoll(argv[4]), cached, kPeer, rng);
    std::string shapes;
    for (size_t i = 0; i < cuda::kPrefillCtasShapes.size(); ++i) {
      if (r.shape_us[i] > 0) {
        shapes += fmt::format("; {} {:.0f} µs",
                              cuda::prefill_ctas_name(cuda::kPrefillCtasShapes[i]), r.shape_us[i]);
      }
    }
    fmt::print("prefill head {} {} x {} after {}: {:.0f} µs, {:.0f} TFLOP/s{}{}\n", argv[2],
               argv[3], argv[4], cached, r.us, r.flops / 1e12, shapes,
               r.peer_us > 0 ? fmt::format("; FlashInfer {:.0f} µs", r.peer_us) : "");
    return;
  }
  if (argc >= 3) {
    const PageOrder order =
        argc >= 4 && std::string(argv[3]) == "hnd" ? PageOrder::kHnd : PageOrder::kNhd;
    const DType dtype = argc >= 5 && std::string(argv[4]) == "fp8" ? DType::kF8E4M3 : DType::kBF16;
    if (dtype != DType::kBF16) fill_random(pool.reinterpret(dtype), 7);
    const Result r =
        run_case(pool, dtype, order, 0, std::stoll(argv[1]), std::stoll(argv[2]), Peer::kNone, rng);
    fmt::print("{} x {} {}: {:.1f} µs, {:.1f}% of copy\n", argv[1], argv[2], page_order_name(order),
               r.us, 100 * r.bandwidth / copy);
    return;
  }
  if (argc == 2 && std::string(argv[1]) == "decode") {
    print_decode_table(pool, copy, rng);
    return;
  }
  const std::vector<double> bf16_us = print_decode_table(pool, copy, rng);
  // e4m3 pages: half the bytes of the bf16 table's, against its times.
  fill_random(pool.reinterpret(DType::kF8E4M3), 7);
  fmt::print("\ne4m3 pages (--kv-cache-dtype fp8), against the bf16 pages above:\n\n");
  fmt::print("| batch | context | µs | GB/s | % of copy | ÷ bf16 time |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  size_t cell = 0;
  for (int64_t batch : {1, 16, 64, 256}) {
    for (int64_t context : {512, 1024, 4096, 16384}) {
      const Result fp8 =
          run_case(pool, DType::kF8E4M3, PageOrder::kNhd, 0, batch, context, Peer::kNone, rng);
      fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.1f}% | {:.2f} |\n", batch, context, fp8.us,
                 fp8.bandwidth / 1e9, 100 * fp8.bandwidth / copy, fp8.us / bf16_us[cell++]);
    }
  }
  fill_random(pool.reinterpret(DType::kBF16), 7);  // verify and prefill read bf16 pages again
  print_verify_table(pool, copy, rng);
  print_prefill_table(pool, rng);
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
