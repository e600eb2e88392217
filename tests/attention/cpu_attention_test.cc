#include "attention/cpu/cpu_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

// One attention case: sequences given as (tokens already cached, new tokens this step).
struct AttentionCase {
  const char* label;
  int64_t block_size;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t head_k;
  int64_t head_v;
  PageOrder order;
  int64_t padding_bytes;  // extra bytes per page (padded pages)
  int64_t slots;          // pages per block id (packed); this layer takes the last slot
  DType cache_dtype;
  int64_t window;
  float softcap;
  bool sinks;
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (cached, new); decodes (x, 1) first
  int64_t padded_rows;                            // rows past num_actual_tokens
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.label;
}

struct Sequence {
  std::vector<int32_t> blocks;
  std::vector<float> keys;    // [total, kv_heads, head_k]: every token's K, cached or new
  std::vector<float> values;  // [total, kv_heads, head_v]
};

float random_value(std::mt19937& rng) {
  return std::uniform_real_distribution<float>(-1, 1)(rng);
}

// Rounds through the cache dtype, as the cache stores it.
float through(DType dtype, float value) {
  std::byte bytes[4];
  cpu::store_float(bytes, dtype, value);
  return cpu::load_float(bytes, dtype);
}

// Dense attention of one query row over keys [0, position], with the same variants.
void dense_reference(const AttentionCase& c, const Sequence& seq, const float* q, int64_t head,
                     int64_t position, float scale, const std::vector<float>& sinks, float* out) {
  const int64_t kv = head / (c.q_heads / c.kv_heads);
  const int64_t first = c.window > 0 ? std::max<int64_t>(0, position - c.window + 1) : 0;
  std::vector<double> scores;
  double max = c.sinks ? sinks[head] : -1e30;
  for (int64_t j = first; j <= position; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < c.head_k; ++d) {
      dot += q[d] * through(c.cache_dtype, seq.keys[(j * c.kv_heads + kv) * c.head_k + d]);
    }
    double score = dot * scale;
    if (c.softcap > 0) score = c.softcap * std::tanh(score / c.softcap);
    scores.push_back(score);
    max = std::max(max, score);
  }
  double sum = c.sinks ? std::exp(sinks[head] - max) : 0.0;
  for (double& s : scores)
    sum += (s = std::exp(s - max));
  for (int64_t d = 0; d < c.head_v; ++d) {
    double acc = 0;
    for (size_t j = 0; j < scores.size(); ++j) {
      acc += scores[j] / sum *
             through(c.cache_dtype, seq.values[((first + j) * c.kv_heads + kv) * c.head_v + d]);
    }
    out[d] = static_cast<float>(acc);
  }
}

class CpuAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CpuAttentionTest, MatchesDenseAttention) {
  const AttentionCase& c = GetParam();
  std::mt19937 rng(1234);
  const KvPageShape page{.block_size = c.block_size,
                         .num_kv_heads = c.kv_heads,
                         .head_size_k = c.head_k,
                         .head_size_v = c.head_v,
                         .dtype = c.cache_dtype};
  const PagedAttentionBackend backend("test", c.order, {});
  int64_t blocks_needed = 1;  // the null block
  for (const auto& [cached, fresh] : c.seqs) {
    blocks_needed += (cached + fresh + c.block_size - 1) / c.block_size;
  }
  const int64_t num_blocks = blocks_needed + 2;
  const int64_t slot_bytes = page.page_bytes() + c.padding_bytes;
  const PagePlacement placement{.offset_bytes = (c.slots - 1) * slot_bytes,
                                .block_stride_bytes = c.slots * slot_bytes};
  const Tensor buffer = Tensor::empty({num_blocks * c.slots * slot_bytes}, DType::kU8);
  const KvCacheView cache = reshape_kv_cache(buffer, backend, page, num_blocks, placement);

  // Blocks in a shuffled order, so block tables are not the identity.
  std::vector<int32_t> free_blocks;
  for (int32_t b = 1; b < num_blocks; ++b)
    free_blocks.push_back(b);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);

  std::vector<Sequence> seqs;
  AttentionMetadata meta;
  meta.query_start.push_back(0);
  int64_t widest = 0;
  for (const auto& [cached, fresh] : c.seqs) {
    Sequence seq;
    const int64_t total = cached + fresh;
    for (int64_t b = 0; b < (total + c.block_size - 1) / c.block_size; ++b) {
      seq.blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    for (int64_t i = 0; i < total * c.kv_heads * c.head_k; ++i)
      seq.keys.push_back(random_value(rng));
    for (int64_t i = 0; i < total * c.kv_heads * c.head_v; ++i)
      seq.values.push_back(random_value(rng));
    // Earlier tokens are already in the cache.
    for (int64_t t = 0; t < cached; ++t) {
      const int64_t block = seq.blocks[t / c.block_size];
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        for (int64_t d = 0; d < c.head_k; ++d) {
          cache.key.select(0, block)
              .select(0, t % c.block_size)
              .select(0, h)
              .select(0, d)
              .fill(seq.keys[(t * c.kv_heads + h) * c.head_k + d]);
        }
        for (int64_t d = 0; d < c.head_v; ++d) {
          cache.value.select(0, block)
              .select(0, t % c.block_size)
              .select(0, h)
              .select(0, d)
              .fill(seq.values[(t * c.kv_heads + h) * c.head_v + d]);
        }
      }
    }
    if (fresh == 1 && cached > 0) meta.num_decode_tokens += 1;
    meta.query_start.push_back(meta.query_start.back() + fresh);
    meta.seq_lens.push_back(total);
    for (int64_t p = cached; p < total; ++p) {
      meta.slot_mapping.push_back(int64_t{seq.blocks[p / c.block_size]} * c.block_size +
                                  p % c.block_size);
    }
    widest = std::max<int64_t>(widest, seq.blocks.size());
    seqs.push_back(std::move(seq));
  }
  // Table rows in reverse sequence order, as a persistent table's rows need not follow the batch.
  std::vector<int32_t> table;
  for (auto seq = seqs.rbegin(); seq != seqs.rend(); ++seq) {
    table.insert(table.end(), seq->blocks.begin(), seq->blocks.end());
    table.resize(table.size() + widest - seq->blocks.size(), 0);
  }
  for (size_t s = 0; s < seqs.size(); ++s)
    meta.block_table_rows.push_back(static_cast<int32_t>(seqs.size() - 1 - s));
  meta.block_table = table;
  meta.block_table_stride = widest;
  const int64_t real = meta.query_start.back();
  meta.num_actual_tokens = real;
  const int64_t rows = real + c.padded_rows;

  // Inputs; padded rows are poisoned with NaN, which would spread into any output that read them.
  Tensor query = Tensor::empty({rows, c.q_heads, c.head_k}, DType::kF32);
  Tensor key = Tensor::empty({rows, c.kv_heads, c.head_k}, DType::kF32);
  Tensor value = Tensor::empty({rows, c.kv_heads, c.head_v}, DType::kF32);
  for (const Tensor* t : {&query, &key, &value})
    t->fill(std::nan(""));
  for (int64_t i = 0; i < real * c.q_heads * c.head_k; ++i)
    query.data<float>()[i] = random_value(rng);
  int64_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = c.seqs[s].first; p < c.seqs[s].first + c.seqs[s].second; ++p, ++row) {
      std::memcpy(key.data<float>() + row * c.kv_heads * c.head_k,
                  seqs[s].keys.data() + p * c.kv_heads * c.head_k, c.kv_heads * c.head_k * 4);
      std::memcpy(value.data<float>() + row * c.kv_heads * c.head_v,
                  seqs[s].values.data() + p * c.kv_heads * c.head_v, c.kv_heads * c.head_v * 4);
    }
  }
  std::vector<float> sinks(c.q_heads);
  for (float& s : sinks)
    s = random_value(rng) * 2;
  AttentionLayerParams params{.num_q_heads = c.q_heads,
                              .num_kv_heads = c.kv_heads,
                              .head_size_k = c.head_k,
                              .head_size_v = c.head_v,
                              .scale = 1.0f / std::sqrt(static_cast<float>(c.head_k)),
                              .sliding_window = c.window,
                              .logit_softcap = c.softcap,
                              .sinks = c.sinks ? sinks.data() : nullptr};
  Tensor output = Tensor::empty({rows, c.q_heads * c.head_v}, DType::kF32);
  output.fill(-7.0);
  cpu_paged_attention(params, query, key, value, cache, meta, output);

  const float tolerance = 2e-5f;  // f32 accumulation against a double reference
  row = 0;
  std::vector<float> expected(c.head_v);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = c.seqs[s].first; p < c.seqs[s].first + c.seqs[s].second; ++p, ++row) {
      for (int64_t h = 0; h < c.q_heads; ++h) {
        dense_reference(c, seqs[s], query.data<float>() + (row * c.q_heads + h) * c.head_k, h, p,
                        params.scale, sinks, expected.data());
        for (int64_t d = 0; d < c.head_v; ++d) {
          ASSERT_NEAR(output.at<float>({row, h * c.head_v + d}), expected[d], tolerance)
              << "seq " << s << " position " << p << " head " << h << " dim " << d;
        }
      }
    }
  }
  for (int64_t r = real; r < rows; ++r) {  // padded output rows are left alone
    for (int64_t i = 0; i < c.q_heads * c.head_v; ++i)
      ASSERT_EQ(output.at<float>({r, i}), -7.0f);
  }

  // Without K/V (a KV-sharing layer): the same output from the cache alone, and no byte written.
  const Tensor before = buffer.clone();
  Tensor cache_only = Tensor::empty(output.shape(), DType::kF32);
  cache_only.fill(-7.0);
  cpu_paged_attention(params, query, Tensor(), Tensor(), cache, meta, cache_only);
  EXPECT_EQ(std::memcmp(before.raw_data(), buffer.raw_data(), buffer.numel()), 0);
  EXPECT_EQ(std::memcmp(cache_only.raw_data(), output.raw_data(), output.numel() * 4), 0);
}

const std::vector<std::pair<int64_t, int64_t>> kMixed = {{7, 1}, {20, 1}, {0, 9}, {5, 6}};

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuAttentionTest,
    ::testing::Values(AttentionCase{"mha", 4, 2, 2, 8, 8, PageOrder::kNhd, 0, 1, DType::kF32, 0, 0,
                                    false, kMixed, 0},
                      AttentionCase{"gqa4", 4, 8, 2, 8, 8, PageOrder::kNhd, 0, 1, DType::kF32, 0, 0,
                                    false, kMixed, 3},
                      AttentionCase{"block1", 1, 4, 2, 8, 8, PageOrder::kNhd, 0, 1, DType::kF32, 0,
                                    0, false, kMixed, 0},
                      AttentionCase{"block16 prefill",
                                    16,
                                    4,
                                    1,
                                    16,
                                    16,
                                    PageOrder::kNhd,
                                    0,
                                    1,
                                    DType::kF32,
                                    0,
                                    0,
                                    false,
                                    {{0, 40}, {3, 30}},
                                    2},
                      AttentionCase{"hnd", 4, 4, 2, 8, 8, PageOrder::kHnd, 0, 1, DType::kF32, 0, 0,
                                    false, kMixed, 1},
                      AttentionCase{"padded pages", 4, 4, 2, 8, 8, PageOrder::kNhd, 96, 1,
                                    DType::kF32, 0, 0, false, kMixed, 0},
                      AttentionCase{"packed hnd", 4, 4, 2, 8, 8, PageOrder::kHnd, 0, 3, DType::kF32,
                                    0, 0, false, kMixed, 0},
                      AttentionCase{"split kv 24/16", 4, 4, 2, 24, 16, PageOrder::kNhd, 0, 1,
                                    DType::kF32, 0, 0, false, kMixed, 2},
                      AttentionCase{"split kv hnd padded", 8, 4, 2, 24, 16, PageOrder::kHnd, 64, 1,
                                    DType::kF32, 0, 0, false, kMixed, 0},
                      AttentionCase{"window 3", 4, 4, 2, 8, 8, PageOrder::kNhd, 0, 1, DType::kF32,
                                    3, 0, false, kMixed, 0},
                      AttentionCase{"window 8 long",
                                    4,
                                    4,
                                    1,
                                    8,
                                    8,
                                    PageOrder::kNhd,
                                    0,
                                    1,
                                    DType::kF32,
                                    8,
                                    0,
                                    false,
                                    {{30, 1}, {0, 33}},
                                    0},
                      AttentionCase{"softcap", 4, 4, 2, 8, 8, PageOrder::kNhd, 0, 1, DType::kF32, 0,
                                    5.0f, false, kMixed, 0},
                      AttentionCase{"sinks", 4, 4, 2, 8, 8, PageOrder::kNhd, 0, 1, DType::kF32, 0,
                                    0, true, kMixed, 0},
                      AttentionCase{"everything", 4, 8, 4, 24, 16, PageOrder::kHnd, 32, 2,
                                    DType::kF32, 5, 10.0f, true, kMixed, 4},
                      AttentionCase{"bf16 cache", 4, 4, 2, 8, 8, PageOrder::kNhd, 0, 1,
                                    DType::kBF16, 0, 0, false, kMixed, 0},
                      AttentionCase{"f16 cache window", 4, 4, 2, 8, 8, PageOrder::kNhd, 0, 1,
                                    DType::kF16, 4, 0, true, kMixed, 0}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) {
      std::string name = info.param.label;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace pagoda
