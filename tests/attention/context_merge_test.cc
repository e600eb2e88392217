// Decode context parallelism's attention, table-driven: each case's keys are dealt over its ranks
// (each rank's own pages, in its share's order), every rank attends its share through the CPU
// backend's plan and returns log-sum-exps, and merge_attention_parts combines the shares. The
// result must be the single-rank attention over the whole sequence: with uneven shares, sliding
// windows that start inside another rank's share, padded pages, sinks (added by one rank), and
// ranks that hold no key a query sees. On a GPU, the merge kernel matches the CPU merge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "attention/backend.h"
#include "attention/context_merge.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

using Seqs = std::vector<std::pair<int64_t, int64_t>>;  // (tokens cached, new tokens)

struct ShareCase {
  std::string label;
  int64_t ranks = 2;
  int64_t interleave = 1;
  int64_t block_size = 4;
  int64_t q_heads = 4;
  int64_t kv_heads = 2;
  int64_t head_k = 8;
  int64_t head_v = 8;
  int64_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  int64_t padding_bytes = 0;  // extra bytes per page
  Seqs seqs;                  // decodes (x, 1) first
};

void PrintTo(const ShareCase& c, std::ostream* os) {
  *os << c.label;
}

// Every token's K and V, the step's query rows, and the sinks: one draw per case.
struct Inputs {
  std::vector<std::vector<float>> keys;    // per sequence: [total, kv_heads, head_k]
  std::vector<std::vector<float>> values;  // per sequence: [total, kv_heads, head_v]
  Tensor query;                            // [rows, q_heads, head_k]
  Tensor key;                              // [rows, kv_heads, head_k]: the new tokens'
  Tensor value;                            // [rows, kv_heads, head_v]
  Tensor sinks;                            // [q_heads]
};

Inputs draw_inputs(const ShareCase& c) {
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.label)));
  auto draw = [&] { return std::uniform_real_distribution<float>(-1, 1)(rng); };
  Inputs in;
  int64_t rows = 0;
  for (const auto& [cached, fresh] : c.seqs) {
    const int64_t total = cached + fresh;
    in.keys.emplace_back(total * c.kv_heads * c.head_k);
    in.values.emplace_back(total * c.kv_heads * c.head_v);
    for (float& k : in.keys.back())
      k = draw();
    for (float& v : in.values.back())
      v = draw();
    rows += fresh;
  }
  in.query = Tensor::empty({rows, c.q_heads, c.head_k}, DType::kF32);
  in.key = Tensor::empty({rows, c.kv_heads, c.head_k}, DType::kF32);
  in.value = Tensor::empty({rows, c.kv_heads, c.head_v}, DType::kF32);
  for (int64_t i = 0; i < in.query.numel(); ++i)
    in.query.data<float>()[i] = draw();
  int64_t row = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int64_t p = c.seqs[s].first; p < c.seqs[s].first + c.seqs[s].second; ++p, ++row) {
      std::memcpy(in.key.data<float>() + row * c.kv_heads * c.head_k,
                  in.keys[s].data() + p * c.kv_heads * c.head_k, c.kv_heads * c.head_k * 4);
      std::memcpy(in.value.data<float>() + row * c.kv_heads * c.head_v,
                  in.values[s].data() + p * c.kv_heads * c.head_v, c.kv_heads * c.head_v * 4);
    }
  }
  in.sinks = Tensor::empty({c.q_heads}, DType::kF32);
  for (int64_t h = 0; h < c.q_heads; ++h)
    in.sinks.data<float>()[h] = draw() * 3;
  return in;
}

// One rank's attention of the step over its share: output [rows, q_heads * head_v] and
// log-sum-exps [rows, q_heads]. `with_kv`: the step writes its K/V first (else a KV-sharing layer
// reads the cache as the previous run left it).
struct RankRun {
  Tensor buffer;
  KvCacheView cache;
  Tensor output;
  Tensor lse;
};

void run_rank(const ShareCase& c, const Inputs& in, const ContextShard& shard, bool with_kv,
              RankRun& run) {
  const KvPageShape page{.block_size = c.block_size,
                         .num_kv_heads = c.kv_heads,
                         .head_size_k = c.head_k,
                         .head_size_v = c.head_v,
                         .dtype = DType::kF32};
  const int64_t block_tokens = c.block_size * shard.size;
  int64_t widest = 0;
  for (const auto& [cached, fresh] : c.seqs)
    widest = std::max(widest, (cached + fresh + block_tokens - 1) / block_tokens);
  const int64_t num_blocks = 1 + widest * static_cast<int64_t>(c.seqs.size());
  const int64_t page_bytes = page.page_bytes() + c.padding_bytes;
  const PagedAttentionBackend layout("layout", PageOrder::kNhd, {});
  const PagePlacement placement{.offset_bytes = 0, .block_stride_bytes = page_bytes};
  if (!run.buffer.defined()) {
    run.buffer = Tensor::empty({num_blocks * page_bytes}, DType::kU8);
    std::memset(run.buffer.raw_data(), 0x7f, run.buffer.numel());  // NaN-like floats
    run.cache = reshape_kv_cache(run.buffer, layout, page, num_blocks, placement);
  }
  // Sequence s holds blocks [1 + s * widest, ...); its owned tokens sit at their local slots.
  AttentionMetadata meta;
  std::vector<int32_t> table;
  meta.query_start.push_back(0);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const auto [cached, fresh] = c.seqs[s];
    for (int64_t b = 0; b < widest; ++b)
      table.push_back(static_cast<int32_t>(1 + s * widest + b));
    const int32_t* blocks = table.data() + s * widest;
    auto slot = [&](int64_t p) {
      const int64_t local = shard.local_index(p);
      return int64_t{blocks[local / c.block_size]} * c.block_size + local % c.block_size;
    };
    for (int64_t p = 0; p < cached && with_kv; ++p) {
      if (!shard.owns(p)) continue;
      for (const auto& [view, source, dim] :
           {std::tuple{&run.cache.key, &in.keys[s], c.head_k},
            std::tuple{&run.cache.value, &in.values[s], c.head_v}}) {
        for (int64_t h = 0; h < c.kv_heads; ++h) {
          float* dst = view->data<float>() + (slot(p) / c.block_size) * view->stride(0) +
                       (slot(p) % c.block_size) * view->stride(1) + h * view->stride(2);
          std::memcpy(dst, source->data() + (p * c.kv_heads + h) * dim, dim * 4);
        }
      }
    }
    if (fresh == 1 && cached > 0) {
      meta.num_decode_seqs += 1;
      meta.num_decode_tokens += 1;
    }
    meta.query_start.push_back(meta.query_start.back() + fresh);
    meta.seq_lens.push_back(cached + fresh);
    meta.block_table_rows.push_back(static_cast<int32_t>(s));
    for (int64_t p = cached; p < cached + fresh; ++p)
      meta.slot_mapping.push_back(with_kv && shard.owns(p) ? slot(p) : -1);
  }
  meta.block_table = table;
  meta.block_table_stride = widest;
  meta.num_actual_tokens = meta.query_start.back();
  meta.context = shard;

  const int64_t rows = in.query.size(0);
  run.output = Tensor::empty({rows, c.q_heads * c.head_v}, DType::kF32);
  run.lse = Tensor::empty({rows, c.q_heads}, DType::kF32);
  const AttentionLayerParams params{
      .num_q_heads = c.q_heads,
      .num_kv_heads = c.kv_heads,
      .head_size_k = c.head_k,
      .head_size_v = c.head_v,
      .scale = 1.0f / std::sqrt(static_cast<float>(c.head_k)),
      .sliding_window = c.window,
      .logit_softcap = c.softcap,
      .sinks = c.sinks && shard.rank == 0 ? in.sinks.data<float>() : nullptr,
      .lse = run.lse.data<float>()};
  const AttentionBackend& backend = find_attention_backend("cpu");
  const std::unique_ptr<AttentionPlan> plan =
      backend.make_plan({.page = page, .max_model_len = widest * block_tokens});
  plan->update(meta, {});
  plan->forward(params, in.query, with_kv ? in.key : Tensor(), with_kv ? in.value : Tensor(),
                run.cache, run.output);
}

class ContextMergeTest : public ::testing::TestWithParam<ShareCase> {};

TEST_P(ContextMergeTest, SharesMergeIntoSingleRankAttention) {
  const ShareCase& c = GetParam();
  const Inputs in = draw_inputs(c);
  RankRun whole;
  run_rank(c, in, {}, true, whole);
  std::vector<RankRun> shares(c.ranks);
  const int64_t rows = in.query.size(0);
  Tensor parts = Tensor::empty({c.ranks, rows, c.q_heads, c.head_v}, DType::kF32);
  Tensor lses = Tensor::empty({c.ranks, rows, c.q_heads}, DType::kF32);
  for (int64_t r = 0; r < c.ranks; ++r) {
    run_rank(c, in, {.rank = r, .size = c.ranks, .interleave = c.interleave}, true, shares[r]);
    parts.select(0, r).copy_from(shares[r].output.view({rows, c.q_heads, c.head_v}));
    lses.select(0, r).copy_from(shares[r].lse);
  }
  const Tensor merged = Tensor::empty({rows, c.q_heads, c.head_v}, DType::kF32);
  merge_attention_parts(parts, lses, 0, merged);
  double worst = 0;
  for (int64_t i = 0; i < merged.numel(); ++i) {
    ASSERT_FALSE(std::isnan(merged.data<float>()[i])) << "element " << i;
    worst = std::max(worst, std::abs(static_cast<double>(merged.data<float>()[i]) -
                                     whole.output.data<float>()[i]));
  }
  EXPECT_LT(worst, 1e-5);
  // The shares' log-sum-exps add up to the whole one's (the sink's counted once).
  for (int64_t i = 0; i < rows * c.q_heads; ++i) {
    double sum = 0;
    for (int64_t r = 0; r < c.ranks; ++r)
      sum += std::exp(static_cast<double>(lses.data<float>()[r * rows * c.q_heads + i]));
    EXPECT_NEAR(std::log(sum), whole.lse.data<float>()[i], 1e-4) << "row·head " << i;
  }
  // A KV-sharing layer over the same shares: the same output, from the caches alone.
  for (int64_t r = 0; r < c.ranks; ++r) {
    RankRun again = shares[r];
    run_rank(c, in, {.rank = r, .size = c.ranks, .interleave = c.interleave}, false, again);
    EXPECT_EQ(
        std::memcmp(again.output.raw_data(), shares[r].output.raw_data(), again.output.numel() * 4),
        0)
        << "rank " << r;
  }
}

// A head range of the merge: what each rank keeps of its DCP group's heads under TP.
TEST(ContextMergeTest, KeepsTheAskedHeads) {
  const int64_t ranks = 2, rows = 3, heads = 4, dim = 2;
  Tensor parts = Tensor::empty({ranks, rows, heads, dim}, DType::kF32);
  Tensor lses = Tensor::empty({ranks, rows, heads}, DType::kF32);
  for (int64_t i = 0; i < parts.numel(); ++i)
    parts.data<float>()[i] = static_cast<float>(i);
  for (int64_t i = 0; i < lses.numel(); ++i)
    lses.data<float>()[i] = i % 3 == 0 ? -std::numeric_limits<float>::infinity() : 0.5f * i;
  const Tensor all = Tensor::empty({rows, heads, dim}, DType::kF32);
  const Tensor some = Tensor::empty({rows, 2, dim}, DType::kF32);
  merge_attention_parts(parts, lses, 0, all);
  merge_attention_parts(parts, lses, 1, some);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        EXPECT_EQ(some.data<float>()[(t * 2 + h) * dim + d],
                  all.data<float>()[(t * heads + h + 1) * dim + d]);
      }
    }
  }
  // Row 0, head 0: both shares saw no key.
  EXPECT_EQ(all.data<float>()[0], 0.0f);
  EXPECT_EQ(all.data<float>()[1], 0.0f);
}

// A host copy of `t` (host) in `dtype`.
Tensor converted(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype);
  const int64_t from = dtype_size(t.dtype());
  const int64_t to = dtype_size(dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    cpu::store_float(out.raw_data() + i * to, dtype,
                     cpu::load_float(t.raw_data() + i * from, t.dtype()));
  }
  return out;
}

// The CUDA merge against the CPU merge on the same (bf16-rounded) parts.
TEST(ContextMergeTest, DeviceMergeMatchesTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t ranks = 3, rows = 37, heads = 6, dim = 128;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-4, 4);
  Tensor parts = Tensor::empty({ranks, rows, heads, dim}, DType::kF32);
  Tensor lses = Tensor::empty({ranks, rows, heads}, DType::kF32);
  for (int64_t i = 0; i < parts.numel(); ++i)
    parts.data<float>()[i] = uniform(rng);
  parts = converted(converted(parts, DType::kBF16), DType::kF32);
  for (int64_t i = 0; i < lses.numel(); ++i)
    lses.data<float>()[i] = i % 7 == 0 ? -std::numeric_limits<float>::infinity() : uniform(rng);
  const Tensor expected = Tensor::empty({rows, 4, dim}, DType::kF32);
  merge_attention_parts(parts, lses, 2, expected);
  const Device gpu = Device::cuda(0);
  const Tensor device_parts = converted(parts, DType::kBF16).to(gpu);
  const Tensor device_out = Tensor::empty({rows, 4, dim}, DType::kBF16, gpu);
  merge_attention_parts(device_parts, lses.to(gpu), 2, device_out);
  const Tensor got = converted(device_out.to(Device::cpu()), DType::kF32);
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double e = expected.data<float>()[i];
    worst = std::max(worst, std::abs(got.data<float>()[i] - e) / std::max(1.0, std::abs(e)));
  }
  EXPECT_LT(worst, 1e-2);  // bf16 output rounding
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ContextMergeTest,
    ::testing::Values(
        ShareCase{.label = "two ranks, one token at a time",
                  .seqs = {{7, 1}, {20, 1}, {0, 9}, {5, 6}}},
        ShareCase{.label = "three ranks, uneven shares, two at a time",
                  .ranks = 3,
                  .interleave = 2,
                  .seqs = {{13, 1}, {0, 11}, {30, 3}}},
        ShareCase{.label = "a window starting inside another rank's share",
                  .interleave = 2,
                  .window = 5,
                  .seqs = {{9, 1}, {0, 14}, {17, 4}}},
        ShareCase{.label = "sinks added once", .sinks = true, .seqs = {{6, 1}, {0, 7}, {11, 2}}},
        ShareCase{.label = "padded pages, eight query heads, softcap",
                  .q_heads = 8,
                  .head_v = 4,
                  .softcap = 5.0f,
                  .padding_bytes = 12,
                  .seqs = {{10, 1}, {0, 13}}},
        ShareCase{.label = "ranks that see no key of a query",
                  .ranks = 4,
                  .interleave = 4,
                  .window = 2,
                  .sinks = true,
                  .seqs = {{1, 1}, {0, 3}, {18, 2}}}),
    [](const auto& info) {
      std::string name;
      for (char ch : info.param.label)
        name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      return name;
    });

}  // namespace
}  // namespace pagoda
