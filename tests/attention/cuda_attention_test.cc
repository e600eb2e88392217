// The CUDA paged attention kernels against the CPU kernel (itself checked against dense attention
// in cpu_attention_test.cc), on the same bf16 cache and inputs. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "attention/cpu/cpu_attention.h"
#include "attention/cuda/attention_plan.h"
#include "attention/cuda/paged_attention.h"
#include "core/device.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

struct CudaAttentionCase {
  const char* label;
  int64_t block_size;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t head_k;
  int64_t head_v;
  PageOrder order;
  int64_t padding_bytes;  // extra bytes per page
  int64_t window;
  float softcap;
  bool sinks;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (cached, new); decodes (x, 1) first
  int64_t padded_rows;
  int64_t fixed_splits;  // 0: chosen per step
};

void PrintTo(const CudaAttentionCase& c, std::ostream* os) {
  *os << c.label;
}

float random_value(std::mt19937& rng) {
  return std::uniform_real_distribution<float>(-1, 1)(rng);
}

// A host bf16 tensor of `shape` with random values in rows [0, real_rows); the rest NaN.
Tensor random_bf16(const Shape& shape, int64_t real_rows, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, DType::kBF16);
  t.fill(std::nan(""));
  const int64_t per_row = t.numel() / shape[0];
  for (int64_t i = 0; i < real_rows * per_row; ++i)
    t.data<uint16_t>()[i] = f32_to_bf16(random_value(rng));
  return t;
}

Tensor widen(const Tensor& bf16) {
  Tensor out = Tensor::empty(bf16.shape(), DType::kF32);
  for (int64_t i = 0; i < bf16.numel(); ++i)
    out.data<float>()[i] = bf16_to_f32(bf16.data<uint16_t>()[i]);
  return out;
}

// Writes random bf16 rows for the first `tokens` positions of a sequence straight into a host view.
void fill_cached(const Tensor& view, const std::vector<int32_t>& blocks, int64_t tokens,
                 std::mt19937& rng) {
  const int64_t block_size = view.size(1);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < view.size(2); ++h) {
      auto* row = reinterpret_cast<uint16_t*>(view.raw_data()) +
                  blocks[t / block_size] * view.stride(0) + (t % block_size) * view.stride(1) +
                  h * view.stride(2);
      for (int64_t d = 0; d < view.size(3); ++d)
        row[d] = f32_to_bf16(random_value(rng));
    }
  }
}

double relative_error(const Tensor& out, const Tensor& ref, int64_t rows) {
  double diff = 0;
  double norm = 0;
  const int64_t n = rows * out.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const double o = bf16_to_f32(out.data<uint16_t>()[i]);
    const double r = ref.data<float>()[i];
    if (std::isnan(o)) return INFINITY;
    diff += (o - r) * (o - r);
    norm += r * r;
  }
  return std::sqrt(diff / norm);
}

class CudaAttentionTest : public ::testing::TestWithParam<CudaAttentionCase> {};

TEST_P(CudaAttentionTest, MatchesCpuKernel) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const CudaAttentionCase& c = GetParam();
  std::mt19937 rng(std::hash<std::string>{}(c.label));
  const KvPageShape page{.block_size = c.block_size,
                         .num_kv_heads = c.kv_heads,
                         .head_size_k = c.head_k,
                         .head_size_v = c.head_v,
                         .dtype = DType::kBF16};
  const PagedAttentionBackend backend("test", c.order, {});
  int64_t blocks_needed = 1;
  for (const auto& [cached, fresh] : c.seqs)
    blocks_needed += (cached + fresh + c.block_size - 1) / c.block_size;
  const int64_t num_blocks = blocks_needed + 3;
  const int64_t stride_bytes = page.page_bytes() + c.padding_bytes;
  const PagePlacement placement{.offset_bytes = 0, .block_stride_bytes = stride_bytes};
  const Tensor host_buffer = Tensor::empty({num_blocks * stride_bytes}, DType::kU8);
  const KvCacheView host_cache =
      reshape_kv_cache(host_buffer, backend, page, num_blocks, placement);

  std::vector<int32_t> free_blocks;
  for (int32_t b = 1; b < num_blocks; ++b)
    free_blocks.push_back(b);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  AttentionMetadata meta;
  meta.query_start.push_back(0);
  std::vector<std::vector<int32_t>> blocks;
  int64_t widest = 0;
  for (const auto& [cached, fresh] : c.seqs) {
    std::vector<int32_t>& seq = blocks.emplace_back();
    const int64_t total = cached + fresh;
    for (int64_t b = 0; b < (total + c.block_size - 1) / c.block_size; ++b) {
      seq.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    fill_cached(host_cache.key, seq, cached, rng);
    fill_cached(host_cache.value, seq, cached, rng);
    if (fresh == 1 && cached > 0) meta.num_decode_tokens += 1;
    meta.query_start.push_back(meta.query_start.back() + fresh);
    meta.seq_lens.push_back(total);
    for (int64_t p = cached; p < total; ++p) {
      meta.slot_mapping.push_back(int64_t{seq[p / c.block_size]} * c.block_size + p % c.block_size);
    }
    widest = std::max<int64_t>(widest, seq.size());
  }
  // Table rows in reverse sequence order, as the persistent table's rows need not follow the batch.
  std::vector<int32_t> table;
  for (auto seq = blocks.rbegin(); seq != blocks.rend(); ++seq) {
    table.insert(table.end(), seq->begin(), seq->end());
    table.resize(table.size() + widest - seq->size(), 0);
  }
  for (size_t s = 0; s < blocks.size(); ++s)
    meta.block_table_rows.push_back(static_cast<int32_t>(blocks.size() - 1 - s));
  meta.block_table = table;
  meta.block_table_stride = widest;
  const int64_t real = meta.query_start.back();
  meta.num_actual_tokens = real;
  const int64_t rows = real + c.padded_rows;

  const Tensor query = random_bf16({rows, c.q_heads, c.head_k}, real, rng);
  const Tensor key = random_bf16({rows, c.kv_heads, c.head_k}, real, rng);
  const Tensor value = random_bf16({rows, c.kv_heads, c.head_v}, real, rng);
  std::vector<float> sinks(c.q_heads);
  for (float& s : sinks)
    s = random_value(rng) * 3;
  AttentionLayerParams params{.num_q_heads = c.q_heads,
                              .num_kv_heads = c.kv_heads,
                              .head_size_k = c.head_k,
                              .head_size_v = c.head_v,
                              .scale = 1.0f / std::sqrt(static_cast<float>(c.head_k)),
                              .sliding_window = c.window,
                              .logit_softcap = c.softcap,
                              .sinks = c.sinks ? sinks.data() : nullptr};

  // The GPU gets the cache as it is before this step's writes.
  const Device gpu = Device::cuda(0);
  const Tensor gpu_buffer = host_buffer.to(gpu);
  const KvCacheView gpu_cache = reshape_kv_cache(gpu_buffer, backend, page, num_blocks, placement);

  Tensor reference = Tensor::empty({rows, c.q_heads * c.head_v}, DType::kF32);
  cpu_paged_attention(params, widen(query), widen(key), widen(value), host_cache, meta, reference);

  cuda::AttentionPlan plan(32, 1024, widest + 4, c.block_size);
  plan.fixed_decode_splits = c.fixed_splits;
  plan.update(meta);
  Tensor host_sinks = Tensor::empty({c.q_heads}, DType::kF32);
  std::memcpy(host_sinks.raw_data(), sinks.data(), c.q_heads * 4);
  const Tensor gpu_sinks = host_sinks.to(gpu);
  AttentionLayerParams gpu_params = params;
  gpu_params.sinks = c.sinks ? gpu_sinks.data<float>() : nullptr;
  const Tensor output = Tensor::empty({rows, c.q_heads * c.head_v}, DType::kBF16, gpu);
  output.fill(std::nan(""));
  cuda::paged_attention(gpu_params, query.to(gpu), key.to(gpu), value.to(gpu), gpu_cache, plan,
                        output);
  const Tensor result = output.to(Device::cpu());

  // bf16 scores, probabilities and output against an f32 kernel on the same bf16 inputs.
  EXPECT_LT(relative_error(result, reference, real), 1e-2);
  for (int64_t i = real * result.size(1); i < result.numel(); ++i) {
    ASSERT_TRUE(std::isnan(bf16_to_f32(result.data<uint16_t>()[i]))) << "padding row written";
  }
  // Both kernels wrote the same bf16 rows at the same slots, and nothing else.
  const Tensor gpu_bytes = gpu_buffer.to(Device::cpu());
  EXPECT_EQ(std::memcmp(gpu_bytes.raw_data(), host_buffer.raw_data(), host_buffer.numel()), 0);

  // Without K/V: the cache as it now is gives the same output, and no byte changes.
  const Tensor again = Tensor::empty(output.shape(), DType::kBF16, gpu);
  again.fill(std::nan(""));
  cuda::paged_attention(gpu_params, query.to(gpu), Tensor(), Tensor(), gpu_cache, plan, again);
  const Tensor again_host = again.to(Device::cpu());
  EXPECT_EQ(std::memcmp(again_host.raw_data(), result.raw_data(), result.numel() * 2), 0);
  const Tensor after = gpu_buffer.to(Device::cpu());
  EXPECT_EQ(std::memcmp(after.raw_data(), host_buffer.raw_data(), host_buffer.numel()), 0);
}

using Seqs = std::vector<std::pair<int64_t, int64_t>>;
const Seqs kMixed = {{700, 1}, {1500, 1}, {33, 1}, {0, 37}, {100, 20}};
const Seqs kLong = {{3000, 1}, {4100, 1}};
const Seqs kPrefill = {{0, 300}, {50, 129}, {0, 1}};
// More (sequence, KV head) pairs than an H200 has multiprocessors: narrow decode CTAs.
const Seqs kManyDecodes = [] {
  Seqs seqs;
  for (int64_t i = 0; i < 24; ++i)
    seqs.push_back({1 + i * 97 % 1300, 1});
  return seqs;
}();

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    ::testing::Values(CudaAttentionCase{"llama nhd", 16, 32, 8, 128, 128, PageOrder::kNhd, 0, 0, 0,
                                        false, kMixed, 3, 0},
                      CudaAttentionCase{"llama hnd", 16, 32, 8, 128, 128, PageOrder::kHnd, 0, 0, 0,
                                        false, kMixed, 0, 0},
                      CudaAttentionCase{"many decodes", 16, 32, 8, 128, 128, PageOrder::kNhd, 0, 0,
                                        0, false, kManyDecodes, 2, 0},
                      CudaAttentionCase{"padded pages", 16, 32, 8, 128, 128, PageOrder::kNhd, 4096,
                                        0, 0, false, kMixed, 1, 0},
                      CudaAttentionCase{"long split decode", 16, 32, 8, 128, 128, PageOrder::kNhd,
                                        0, 0, 0, false, kLong, 0, 0},
                      // A graph's fixed split count: the short sequences use fewer splits.
                      CudaAttentionCase{"fixed splits, short and long",
                                        16,
                                        8,
                                        2,
                                        128,
                                        128,
                                        PageOrder::kNhd,
                                        0,
                                        0,
                                        0,
                                        true,
                                        {{5, 1}, {70, 1}, {300, 1}, {1200, 1}},
                                        2,
                                        9},
                      // V in two slices, each with its own partial results.
                      CudaAttentionCase{"split decode 512 wide", 16, 8, 2, 512, 512,
                                        PageOrder::kNhd, 0, 0, 0, false, kLong, 0, 6},
                      CudaAttentionCase{"sliding softcap sinks 256", 16, 8, 2, 256, 256,
                                        PageOrder::kNhd, 0, 100, 30.0f, true, kMixed, 1, 0},
                      CudaAttentionCase{"split kv 192/128", 32, 16, 4, 192, 128, PageOrder::kHnd, 0,
                                        128, 0, true, kMixed, 0, 0},
                      // Pages of a size that is no power of two, over a table window's end.
                      CudaAttentionCase{"block 24 hnd",
                                        24,
                                        32,
                                        8,
                                        128,
                                        128,
                                        PageOrder::kHnd,
                                        0,
                                        0,
                                        0,
                                        false,
                                        {{7000, 1}, {30, 1}, {100, 300}},
                                        0,
                                        0},
                      CudaAttentionCase{"mha 64 block 1", 1, 4, 4, 64, 64, PageOrder::kNhd, 0, 0, 0,
                                        false, kMixed, 0, 0},
                      CudaAttentionCase{"group 16", 16, 64, 4, 128, 128, PageOrder::kNhd, 0, 0, 0,
                                        false, kMixed, 0, 0},
                      CudaAttentionCase{"group 32 decodes as prefill", 16, 64, 2, 64, 64,
                                        PageOrder::kHnd, 0, 0, 0, true, kMixed, 0, 0},
                      CudaAttentionCase{"prefill chunks", 16, 32, 8, 128, 128, PageOrder::kNhd, 0,
                                        64, 0, false, kPrefill, 5, 0}));

}  // namespace
}  // namespace pagoda
