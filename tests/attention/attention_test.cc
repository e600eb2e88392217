// Every attention backend of this build, through its plan (make_plan, update, forward), against
// dense attention in double precision on the same pages and inputs: one table of cases, each run
// on every backend whose declared support covers it. A case checks the output of every real row,
// that padding rows are neither read nor written, that the cache gains exactly the step's K/V at
// their slots, and that the same step without K/V (a KV-sharing layer) gives the same output and
// writes nothing. Backends on a GPU skip themselves without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>

#include "attention/backend.h"
#include "ops/cpu/ops.h"
#if PAGODA_HAVE_CUDA
#include "attention/cuda/cuda_backend.h"
#include "attention/cuda/paged_attention.h"
#endif

namespace pagoda {
namespace {

using Seqs = std::vector<std::pair<int64_t, int64_t>>;  // (tokens cached, new tokens)

struct AttentionCase {
  std::string label;
  int64_t block_size = 4;
  int64_t q_heads = 4;
  int64_t kv_heads = 2;
  int64_t head_k = 8;
  int64_t head_v = 8;
  PageOrder order = PageOrder::kNhd;
  int64_t padding_bytes = 0;  // extra bytes per page (padded pages)
  int64_t slots = 1;          // pages per block id (packed); this layer takes the last slot
  DType cache_dtype = DType::kF32;
  float k_scale = 1.0f;  // an e4m3 cache's scales (AttentionLayerParams::k_scale, v_scale)
  float v_scale = 1.0f;
  int64_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
  Seqs seqs;                  // decodes (x, 1) first
  int64_t verify_seqs = 0;    // the first ones decode all their new rows (a token and its drafts)
  int64_t padded_rows = 0;    // rows past num_actual_tokens
  int64_t graph_max_len = 0;  // > 0: a CUDA graph's step, for sequences of at most this many
  // Every byte of the pool before the sequences' tokens are written: what slots no token has
  // written hold (0xff: bf16 and f32 NaNs).
  uint8_t fill = 0x5a;
  // Under decode context parallelism, the rank whose share of each sequence's tokens the cache
  // holds (at their local slots) and the attention sees; the masks use global positions.
  ContextShard context;
};

struct BackendCase {
  std::string backend;
  AttentionCase c;
  // The CUDA backend's prefill CTAs, a cuda::PrefillCtas other than kDefault, or 0: the plan's own.
  int prefill_ctas = 0;
};

void PrintTo(const BackendCase& bc, std::ostream* os) {
  *os << bc.backend << ": " << bc.c.label;
}

float random_value(std::mt19937& rng) {
  return std::uniform_real_distribution<float>(-1, 1)(rng);
}

// `value` as a `dtype` element holds it.
float round_to(DType dtype, float value) {
  std::byte bytes[4];
  cpu::store_float(bytes, dtype, value);
  return cpu::load_float(bytes, dtype);
}

// A host tensor of `shape` in `dtype` holding `values` (row-major), NaN past them.
Tensor host_tensor(const Shape& shape, DType dtype, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t element = dtype_size(dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    cpu::store_float(static_cast<std::byte*>(t.raw_data()) + i * element, dtype,
                     i < static_cast<int64_t>(values.size()) ? values[i] : NAN);
  }
  return t;
}

std::vector<float> host_floats(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  std::vector<float> out(host.numel());
  const int64_t element = dtype_size(host.dtype());
  for (int64_t i = 0; i < host.numel(); ++i)
    out[i] =
        cpu::load_float(static_cast<const std::byte*>(host.raw_data()) + i * element, host.dtype());
  return out;
}

// Writes one token's K or V row, times `factor`, into a (host) view of the cache.
void store_row(const Tensor& view, int64_t slot, int64_t head, const float* row, float factor) {
  const int64_t block_size = view.size(1);
  const int64_t element = dtype_size(view.dtype());
  auto* dst = static_cast<std::byte*>(view.raw_data()) +
              ((slot / block_size) * view.stride(0) + (slot % block_size) * view.stride(1) +
               head * view.stride(2)) *
                  element;
  for (int64_t d = 0; d < view.size(3); ++d)
    cpu::store_float(dst + d * view.stride(3) * element, view.dtype(), row[d] * factor);
}

// One sequence of the step: its blocks, and every token's K and V as the cache stores them.
struct Sequence {
  std::vector<int32_t> blocks;
  std::vector<float> keys;    // [total, kv_heads, head_k]
  std::vector<float> values;  // [total, kv_heads, head_v]
  // The slot of an owned position: its local index among the rank's tokens of the sequence.
  int64_t slot(int64_t position, int64_t block_size, const ContextShard& context) const {
    const int64_t local = context.local_index(position);
    return int64_t{blocks[local / block_size]} * block_size + local % block_size;
  }
};

// Dense attention of one query row (query head `head`) over the keys in [0, position] the case's
// rank holds, with the case's variants, in double. Returns the log-sum-exp of its scores (the
// sink's included; -inf without any).
double dense_reference(const AttentionCase& c, const Sequence& seq, const float* q, int64_t head,
                       int64_t position, double scale, const std::vector<float>& sinks,
                       double* out) {
  const int64_t kv = head / (c.q_heads / c.kv_heads);
  const int64_t first = c.window > 0 ? std::max<int64_t>(0, position - c.window + 1) : 0;
  std::vector<double> scores;
  double max = c.sinks ? sinks[head] : -1e300;
  std::vector<int64_t> keys;
  for (int64_t j = first; j <= position; ++j) {
    if (!c.context.owns(j)) continue;
    keys.push_back(j);
    const float* k = seq.keys.data() + (j * c.kv_heads + kv) * c.head_k;
    double dot = 0;
    for (int64_t d = 0; d < c.head_k; ++d)
      dot += static_cast<double>(q[d]) * k[d];
    double score = dot * scale;
    if (c.softcap > 0) score = c.softcap * std::tanh(score / c.softcap);
    scores.push_back(score);
    max = std::max(max, score);
  }
  double sum = c.sinks ? std::exp(sinks[head] - max) : 0.0;
  for (double& s : scores)
    sum += (s = std::exp(s - max));
  for (int64_t d = 0; d < c.head_v; ++d)
    out[d] = 0;
  for (size_t j = 0; j < scores.size(); ++j) {
    const float* v = seq.values.data() + (keys[j] * c.kv_heads + kv) * c.head_v;
    for (int64_t d = 0; d < c.head_v; ++d)
      out[d] += scores[j] / sum * v[d];
  }
  return sum > 0 ? max + std::log(sum) : -std::numeric_limits<double>::infinity();
}

class AttentionTest : public ::testing::TestWithParam<BackendCase> {};

TEST_P(AttentionTest, MatchesDenseAttention) {
  const AttentionBackend& backend = find_attention_backend(GetParam().backend);
  const AttentionCase& c = GetParam().c;
  const bool gpu = backend.device_type() == DeviceType::kCuda;
  if (gpu && cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device device = gpu ? Device::cuda(0) : Device::cpu();
  // Activations are f32 on the CPU and bf16 on a GPU; inputs are drawn at that precision.
  const DType activation = gpu ? DType::kBF16 : DType::kF32;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(c.label)));
  auto draw = [&] { return round_to(activation, random_value(rng)); };

  const KvPageShape page{.block_size = c.block_size,
                         .num_kv_heads = c.kv_heads,
                         .head_size_k = c.head_k,
                         .head_size_v = c.head_v,
                         .dtype = c.cache_dtype};
  const int64_t block_tokens = c.block_size * c.context.size;  // a block id's tokens, all ranks'
  int64_t num_blocks = 3;                                      // the null block, and two never used
  for (const auto& [cached, fresh] : c.seqs)
    num_blocks += (cached + fresh + block_tokens - 1) / block_tokens;
  const int64_t slot_bytes = page.page_bytes() + c.padding_bytes;
  const PagePlacement placement{.offset_bytes = (c.slots - 1) * slot_bytes,
                                .block_stride_bytes = c.slots * slot_bytes};
  // The case's page order: backends read pages through the view's strides.
  const PagedAttentionBackend layout("layout", c.order, {});
  const Tensor buffer = Tensor::empty({num_blocks * c.slots * slot_bytes}, DType::kU8);
  std::memset(buffer.raw_data(), c.fill, buffer.numel());
  const KvCacheView host_cache = reshape_kv_cache(buffer, layout, page, num_blocks, placement);

  // Blocks in a shuffled order, so block tables are not the identity.
  std::vector<int32_t> free_blocks;
  for (int32_t b = 1; b < num_blocks; ++b)
    free_blocks.push_back(b);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<Sequence> seqs;
  AttentionMetadata meta;
  meta.query_start.push_back(0);
  int64_t widest = 0;
  int64_t longest = 0;
  for (const auto& [cached, fresh] : c.seqs) {
    Sequence& seq = seqs.emplace_back();
    const int64_t total = cached + fresh;
    for (int64_t b = 0; b < (total + block_tokens - 1) / block_tokens; ++b) {
      seq.blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    for (int64_t i = 0; i < total * c.kv_heads * c.head_k; ++i)
      seq.keys.push_back(draw());
    for (int64_t i = 0; i < total * c.kv_heads * c.head_v; ++i)
      seq.values.push_back(draw());
    if (static_cast<int64_t>(seqs.size()) <= c.verify_seqs || (fresh == 1 && cached > 0)) {
      meta.num_decode_seqs += 1;
      meta.num_decode_tokens += fresh;
    }
    meta.query_start.push_back(meta.query_start.back() + fresh);
    meta.seq_lens.push_back(total);
    for (int64_t p = cached; p < total; ++p)
      meta.slot_mapping.push_back(c.context.owns(p) ? seq.slot(p, c.block_size, c.context) : -1);
    widest = std::max<int64_t>(widest, seq.blocks.size());
    longest = std::max(longest, total);
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
  meta.context = c.context;
  const int64_t real = meta.query_start.back();
  meta.num_actual_tokens = real;
  const int64_t rows = real + c.padded_rows;

  // Earlier tokens are in the cache before the step; the expected cache adds the new ones. An e4m3
  // cache holds each value times 1 / its scale.
  const float k_scale = cache_scale(c.cache_dtype, c.k_scale);
  const float v_scale = cache_scale(c.cache_dtype, c.v_scale);
  const float k_inverse = 1.0f / k_scale;
  const float v_inverse = 1.0f / v_scale;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = 0; p < c.seqs[s].first; ++p) {
      if (!c.context.owns(p)) continue;
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        const int64_t slot = seqs[s].slot(p, c.block_size, c.context);
        store_row(host_cache.key, slot, h, &seqs[s].keys[(p * c.kv_heads + h) * c.head_k],
                  k_inverse);
        store_row(host_cache.value, slot, h, &seqs[s].values[(p * c.kv_heads + h) * c.head_v],
                  v_inverse);
      }
    }
  }
  const Tensor expected_cache = buffer.clone();
  const KvCacheView expected_view =
      reshape_kv_cache(expected_cache, layout, page, num_blocks, placement);
  std::vector<float> query_values, key_values, value_values;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = c.seqs[s].first; p < c.seqs[s].first + c.seqs[s].second; ++p) {
      for (int64_t i = 0; i < c.q_heads * c.head_k; ++i)
        query_values.push_back(draw());
      const float* k = &seqs[s].keys[p * c.kv_heads * c.head_k];
      const float* v = &seqs[s].values[p * c.kv_heads * c.head_v];
      key_values.insert(key_values.end(), k, k + c.kv_heads * c.head_k);
      value_values.insert(value_values.end(), v, v + c.kv_heads * c.head_v);
      for (int64_t h = 0; h < c.kv_heads && c.context.owns(p); ++h) {
        const int64_t slot = seqs[s].slot(p, c.block_size, c.context);
        store_row(expected_view.key, slot, h, k + h * c.head_k, k_inverse);
        store_row(expected_view.value, slot, h, v + h * c.head_v, v_inverse);
      }
    }
  }
  // The reference reads K and V as the cache holds them, times their scales.
  for (Sequence& seq : seqs) {
    for (float& k : seq.keys)
      k = round_to(c.cache_dtype, k * k_inverse) * k_scale;
    for (float& v : seq.values)
      v = round_to(c.cache_dtype, v * v_inverse) * v_scale;
  }
  std::vector<float> sinks(c.q_heads);
  for (float& s : sinks)
    s = random_value(rng) * 3;

  // The backend's run, on its device. Padding rows of the inputs are NaN.
  const Tensor device_buffer = gpu ? buffer.to(device) : buffer;
  const KvCacheView cache = reshape_kv_cache(device_buffer, layout, page, num_blocks, placement);
  const Tensor query =
      host_tensor({rows, c.q_heads, c.head_k}, activation, query_values).to(device);
  const Tensor key = host_tensor({rows, c.kv_heads, c.head_k}, activation, key_values).to(device);
  const Tensor value =
      host_tensor({rows, c.kv_heads, c.head_v}, activation, value_values).to(device);
  const Tensor sink_tensor = host_tensor({c.q_heads}, DType::kF32, sinks).to(device);
  const Tensor lse = host_tensor({rows, c.q_heads}, DType::kF32, {}).to(device);
  AttentionLayerParams params{.num_q_heads = c.q_heads,
                              .num_kv_heads = c.kv_heads,
                              .head_size_k = c.head_k,
                              .head_size_v = c.head_v,
                              .scale = 1.0f / std::sqrt(static_cast<float>(c.head_k)),
                              .sliding_window = c.window,
                              .logit_softcap = c.softcap,
                              .sinks = c.sinks ? sink_tensor.data<float>() : nullptr,
                              .lse = lse.data<float>(),
                              .k_scale = c.k_scale,
                              .v_scale = c.v_scale};
  const AttentionGroup group{.page = page,
                             .max_model_len = c.graph_max_len > 0 ? c.graph_max_len : longest,
                             .device = device};
  std::unique_ptr<AttentionPlan> plan;
#if PAGODA_HAVE_CUDA
  if (GetParam().prefill_ctas != 0) {
    plan = make_cuda_plan(group, static_cast<cuda::PrefillCtas>(GetParam().prefill_ctas));
  }
#endif
  if (!plan) plan = backend.make_plan(group);
  plan->update(meta, {.graph = c.graph_max_len > 0});
  const Tensor output = host_tensor({rows, c.q_heads * c.head_v}, activation, {}).to(device);
  plan->forward(params, query, key, value, cache, output);
  const std::vector<float> result = host_floats(output);
  const std::vector<float> lses = host_floats(lse);

  double worst = 0, diff2 = 0, norm2 = 0, worst_lse = 0;
  int64_t row = 0;
  std::vector<double> expected(c.head_v);
  const std::vector<float> queries = host_floats(query);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = c.seqs[s].first; p < c.seqs[s].first + c.seqs[s].second; ++p, ++row) {
      for (int64_t h = 0; h < c.q_heads; ++h) {
        const double expected_lse =
            dense_reference(c, seqs[s], &queries[(row * c.q_heads + h) * c.head_k], h, p,
                            params.scale, sinks, expected.data());
        const float got_lse = lses[row * c.q_heads + h];
        if (std::isinf(expected_lse)) {
          // A row that sees none of the rank's keys: no mass, and an output of zeros.
          EXPECT_TRUE(std::isinf(got_lse) && got_lse < 0) << "seq " << s << " position " << p;
        } else {
          worst_lse = std::max(worst_lse, std::abs(got_lse - expected_lse));
        }
        for (int64_t d = 0; d < c.head_v; ++d) {
          const double got = result[(row * c.q_heads + h) * c.head_v + d];
          ASSERT_FALSE(std::isnan(got)) << "seq " << s << " position " << p << " head " << h;
          worst = std::max(worst, std::abs(got - expected[d]));
          diff2 += (got - expected[d]) * (got - expected[d]);
          norm2 += expected[d] * expected[d];
        }
      }
    }
  }
  if (activation == DType::kF32) {
    EXPECT_LT(worst, 2e-5);      // f32 accumulation against a double reference
    EXPECT_LT(worst_lse, 1e-4);  // log-sum-exps of up to thousands of scores
  } else {
    EXPECT_LT(std::sqrt(diff2 / norm2), 1e-2);  // bf16 scores, probabilities and output
    EXPECT_LT(worst_lse, 2e-2);                 // scores from bf16 q·k products
  }
  for (int64_t i = real * c.q_heads * c.head_v; i < static_cast<int64_t>(result.size()); ++i)
    ASSERT_TRUE(std::isnan(result[i])) << "padding row written";
  for (int64_t i = real * c.q_heads; i < static_cast<int64_t>(lses.size()); ++i)
    ASSERT_TRUE(std::isnan(lses[i])) << "padding row's log-sum-exp written";
  // The cache gained exactly the step's K/V, at their slots.
  const Tensor written = device_buffer.to(Device::cpu());
  EXPECT_EQ(std::memcmp(written.raw_data(), expected_cache.raw_data(), written.numel()), 0);

  // Without K/V (a KV-sharing layer): the same output from the cache alone, no byte written.
  params.lse = nullptr;
  const Tensor again = host_tensor(output.shape(), activation, {}).to(device);
  plan->forward(params, query, Tensor(), Tensor(), cache, again);
  const Tensor first_bytes = output.to(Device::cpu());
  const Tensor again_bytes = again.to(Device::cpu());
  EXPECT_EQ(std::memcmp(again_bytes.raw_data(), first_bytes.raw_data(),
                        first_bytes.numel() * dtype_size(activation)),
            0);
  const Tensor after = device_buffer.to(Device::cpu());
  EXPECT_EQ(std::memcmp(after.raw_data(), expected_cache.raw_data(), after.numel()), 0);
}

const Seqs kShort = {{7, 1}, {20, 1}, {0, 9}, {5, 6}};
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

// A Llama-shaped bf16 layer: 32 query heads over 8 KV heads of 128, pages of 16.
AttentionCase llama(std::string label, Seqs seqs) {
  return {.label = std::move(label),
          .block_size = 16,
          .q_heads = 32,
          .kv_heads = 8,
          .head_k = 128,
          .head_v = 128,
          .cache_dtype = DType::kBF16,
          .seqs = std::move(seqs)};
}

std::vector<AttentionCase> cases() {
  std::vector<AttentionCase> all = {
      // Small f32 layers: every layout and variant.
      {.label = "mha", .q_heads = 2, .seqs = kShort},
      {.label = "gqa4", .q_heads = 8, .seqs = kShort, .padded_rows = 3},
      {.label = "block1", .block_size = 1, .seqs = kShort},
      {.label = "block16 prefill",
       .block_size = 16,
       .kv_heads = 1,
       .head_k = 16,
       .head_v = 16,
       .seqs = {{0, 40}, {3, 30}},
       .padded_rows = 2},
      {.label = "hnd", .order = PageOrder::kHnd, .seqs = kShort, .padded_rows = 1},
      {.label = "padded pages", .padding_bytes = 96, .seqs = kShort},
      {.label = "packed hnd", .order = PageOrder::kHnd, .slots = 3, .seqs = kShort},
      {.label = "split kv 24/16", .head_k = 24, .head_v = 16, .seqs = kShort, .padded_rows = 2},
      {.label = "split kv hnd padded",
       .block_size = 8,
       .head_k = 24,
       .head_v = 16,
       .order = PageOrder::kHnd,
       .padding_bytes = 64,
       .seqs = kShort},
      {.label = "window 3", .window = 3, .seqs = kShort},
      {.label = "window 8 long", .kv_heads = 1, .window = 8, .seqs = {{30, 1}, {0, 33}}},
      {.label = "softcap", .softcap = 5.0f, .seqs = kShort},
      {.label = "sinks", .sinks = true, .seqs = kShort},
      {.label = "everything",
       .q_heads = 8,
       .kv_heads = 4,
       .head_k = 24,
       .head_v = 16,
       .order = PageOrder::kHnd,
       .padding_bytes = 32,
       .slots = 2,
       .window = 5,
       .softcap = 10.0f,
       .sinks = true,
       .seqs = kShort,
       .padded_rows = 4},
      {.label = "bf16 cache", .cache_dtype = DType::kBF16, .seqs = kShort},
      // e4m3 pages (--kv-cache-dtype fp8): the reference reads K and V rounded to e4m3.
      {.label = "fp8 cache", .cache_dtype = DType::kF8E4M3, .seqs = kShort},
      // A checkpoint's calibrated scales: the cache holds K / 0.05 and V / 3.
      {.label = "fp8 cache scaled",
       .cache_dtype = DType::kF8E4M3,
       .k_scale = 0.05f,
       .v_scale = 3.0f,
       .seqs = kShort},
      // Scales on any other cache are ignored.
      {.label = "bf16 cache ignores scales",
       .cache_dtype = DType::kBF16,
       .k_scale = 0.05f,
       .v_scale = 3.0f,
       .seqs = kShort},
      {.label = "fp8 cache split heads window",
       .head_k = 24,
       .head_v = 16,
       .cache_dtype = DType::kF8E4M3,
       .window = 4,
       .sinks = true,
       .seqs = kShort},
      {.label = "f16 cache window",
       .cache_dtype = DType::kF16,
       .window = 4,
       .sinks = true,
       .seqs = kShort},
  };
  // Real shapes with a bf16 cache, as a GPU runs them.
  AttentionCase c = llama("llama nhd", kMixed);
  c.padded_rows = 3;
  all.push_back(c);
  c = llama("llama hnd", kMixed);
  c.order = PageOrder::kHnd;
  all.push_back(c);
  c = llama("many decodes", kManyDecodes);
  c.padded_rows = 2;
  all.push_back(c);
  // Slots no token has written hold NaNs: neither the keys past a sequence's end in its last
  // page nor rows a kernel stages and masks may reach an output (here, and in a sliding layer
  // below).
  c = llama("nan-filled pages", kMixed);
  c.fill = 0xff;
  all.push_back(c);
  c = llama("padded pages 128", kMixed);
  c.padding_bytes = 4096;
  c.padded_rows = 1;
  all.push_back(c);
  all.push_back(llama("long split decode", kLong));
  // A graph's step: KV splits fixed for sequences of up to 2400 tokens, which these are far from.
  c = llama("graph splits, short and long", {{5, 1}, {70, 1}, {300, 1}, {1200, 1}});
  c.q_heads = 8;
  c.kv_heads = 2;
  c.sinks = true;
  c.padded_rows = 2;
  c.graph_max_len = 2400;
  all.push_back(c);
  // V in two slices, each with its own partial results.
  c = llama("split decode 512 wide", kLong);
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_k = c.head_v = 512;
  all.push_back(c);
  c = llama("sliding softcap sinks 256", kMixed);
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_k = c.head_v = 256;
  c.window = 100;
  c.softcap = 30.0f;
  c.sinks = true;
  c.padded_rows = 1;
  all.push_back(c);
  c.label = "nan-filled sliding 256";
  c.fill = 0xff;
  all.push_back(c);
  c = llama("split kv 192/128 hnd", kMixed);
  c.block_size = 32;
  c.q_heads = 16;
  c.kv_heads = 4;
  c.head_k = 192;
  c.order = PageOrder::kHnd;
  c.window = 128;
  c.sinks = true;
  all.push_back(c);
  // Pages of a size that is no power of two, over a table window's end.
  c = llama("block 24 hnd", {{7000, 1}, {30, 1}, {100, 300}});
  c.block_size = 24;
  c.order = PageOrder::kHnd;
  all.push_back(c);
  c = llama("mha 64 block 1", kMixed);
  c.block_size = 1;
  c.q_heads = c.kv_heads = 4;
  c.head_k = c.head_v = 64;
  all.push_back(c);
  c = llama("group 16", kMixed);
  c.q_heads = 64;
  c.kv_heads = 4;
  all.push_back(c);
  c = llama("group 32 decodes as prefill", kMixed);
  c.q_heads = 64;
  c.kv_heads = 2;
  c.head_k = c.head_v = 64;
  c.order = PageOrder::kHnd;
  c.sinks = true;
  all.push_back(c);
  // Verify steps: decodes of a token and its drafts, causal inside the draft window, in one or
  // more row tiles, with and without KV splits.
  c = llama("verify 2 to 8", {{700, 2}, {1500, 5}, {33, 8}, {4, 3}, {0, 37}, {100, 20}});
  c.verify_seqs = 4;
  c.padded_rows = 3;
  all.push_back(c);
  c = llama("verify split long", {{3000, 4}, {4100, 8}});
  c.verify_seqs = 2;
  all.push_back(c);
  c = llama("verify padded pages", {{60, 4}, {900, 4}, {17, 4}});
  c.verify_seqs = 3;
  c.padding_bytes = 4096;
  all.push_back(c);
  c = llama("verify sliding softcap sinks", {{300, 6}, {40, 3}, {0, 12}});
  c.verify_seqs = 2;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_k = c.head_v = 256;
  c.window = 4;
  c.softcap = 30.0f;
  c.sinks = true;
  all.push_back(c);
  c = llama("verify 512 wide", {{3000, 5}, {200, 5}});
  c.verify_seqs = 2;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_k = c.head_v = 512;
  all.push_back(c);
  c = llama("verify graph splits", {{5, 4}, {70, 4}, {300, 4}, {1200, 4}});
  c.verify_seqs = 4;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.graph_max_len = 2400;
  c.padded_rows = 4;
  all.push_back(c);
  c = {.label = "verify f32 window",
       .q_heads = 8,
       .window = 3,
       .seqs = {{7, 3}, {20, 5}, {0, 9}},
       .verify_seqs = 2};
  all.push_back(c);
  c = llama("prefill chunks", kPrefill);
  c.window = 64;
  c.padded_rows = 5;
  all.push_back(c);
  // Decode context parallelism: one rank's share of each sequence's tokens, dealt `interleave` at
  // a time; windows that start in another rank's share, and rows that see none of this rank's
  // keys (no mass: zeros and a log-sum-exp of -inf).
  all.push_back({.label = "dcp rank 1 of 2",
                 .q_heads = 8,
                 .seqs = kShort,
                 .padded_rows = 2,
                 .context = {.rank = 1, .size = 2}});
  all.push_back({.label = "dcp rank 2 of 3 interleave 2 window sinks",
                 .head_k = 24,
                 .head_v = 16,
                 .window = 5,
                 .sinks = true,
                 .seqs = kShort,
                 .context = {.rank = 2, .size = 3, .interleave = 2}});
  c = llama("dcp rank 1 of 2 interleave 8", kMixed);
  c.padded_rows = 2;
  c.context = {.rank = 1, .size = 2, .interleave = 8};
  all.push_back(c);
  c = llama("dcp long split decode rank 3 of 4", kLong);
  c.context = {.rank = 3, .size = 4};
  all.push_back(c);
  c = llama("dcp verify sliding sinks", {{300, 6}, {40, 3}, {0, 12}});
  c.verify_seqs = 2;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_k = c.head_v = 256;
  c.window = 4;
  c.sinks = true;
  c.context = {.rank = 0, .size = 2, .interleave = 4};
  all.push_back(c);
  c = llama("dcp prefill window rows without keys", kPrefill);
  c.window = 4;
  c.padded_rows = 3;
  c.context = {.rank = 0, .size = 2, .interleave = 4};
  all.push_back(c);
  c = llama("dcp graph splits", {{5, 1}, {70, 1}, {300, 1}, {1200, 1}});
  c.q_heads = 8;
  c.kv_heads = 2;
  c.graph_max_len = 2400;
  c.padded_rows = 2;
  c.context = {.rank = 1, .size = 2, .interleave = 2};
  all.push_back(c);
  c = llama("dcp split decode 512 wide", kLong);
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_k = c.head_v = 512;
  c.context = {.rank = 1, .size = 2};
  all.push_back(c);
  // Every head size a backend declares (the CUDA kernels' list), decodes and prefills.
  for (const auto& [k, v] : std::vector<std::pair<int64_t, int64_t>>{{16, 16},
                                                                     {24, 16},
                                                                     {32, 32},
                                                                     {64, 64},
                                                                     {128, 128},
                                                                     {192, 128},
                                                                     {256, 256},
                                                                     {512, 512}}) {
    c = llama(fmt::format("heads {}/{}", k, v), {{40, 1}, {3, 1}, {0, 20}, {17, 9}});
    c.q_heads = 8;
    c.kv_heads = 2;
    c.head_k = k;
    c.head_v = v;
    all.push_back(c);
  }
  // e4m3 pages (--kv-cache-dtype fp8) at real shapes: the paths of the bf16 cases above (decode
  // widths, KV splits, V slices, verify rows, prefill chunks, padded pages, DCP) and every head
  // size whose e4m3 rows are whole 16-byte pieces.
  const std::vector<std::string> fp8_labels = {"llama nhd",
                                               "many decodes",
                                               "padded pages 128",
                                               "long split decode",
                                               "graph splits, short and long",
                                               "split decode 512 wide",
                                               "sliding softcap sinks 256",
                                               "split kv 192/128 hnd",
                                               "block 24 hnd",
                                               "verify 2 to 8",
                                               "verify 512 wide",
                                               "prefill chunks",
                                               "dcp rank 1 of 2 interleave 8",
                                               "heads 16/16",
                                               "heads 32/32",
                                               "heads 64/64"};
  for (const std::string& label : fp8_labels) {
    const auto found = std::find_if(all.begin(), all.end(),
                                    [&](const AttentionCase& each) { return each.label == label; });
    if (found == all.end()) throw std::logic_error("no attention case " + label);
    c = *found;
    c.label = "fp8 " + label;
    c.cache_dtype = DType::kF8E4M3;
    all.push_back(c);
  }
  // Scaled e4m3 pages, written by the write kernel (verify rows) and in the decode kernel.
  c = llama("fp8 scaled", {{700, 1}, {1500, 1}, {33, 3}, {3000, 1}, {0, 37}});
  c.verify_seqs = 3;
  c.cache_dtype = DType::kF8E4M3;
  c.k_scale = 0.05f;
  c.v_scale = 3.0f;
  all.push_back(c);
  c.label = "fp8 scaled, written in the decode kernel";
  c.seqs = {{700, 1}, {1500, 1}, {0, 37}};
  c.verify_seqs = 0;
  all.push_back(c);
  return all;
}

// Whether `backend` declares support for the case's layer.
bool supports(const AttentionBackend& backend, const AttentionCase& c) {
  const AttentionSupport& support = backend.support();
  const auto listed = [](const auto& list, const auto& item) {
    return list.empty() || std::find(list.begin(), list.end(), item) != list.end();
  };
  const int64_t multiple = support.row_bytes_multiple;
  const auto whole = [&](int64_t head_size) {
    return multiple == 0 || head_size * dtype_size(c.cache_dtype) % multiple == 0;
  };
  return listed(support.head_sizes, std::pair{c.head_k, c.head_v}) &&
         listed(support.cache_dtypes, c.cache_dtype) && whole(c.head_k) && whole(c.head_v) &&
         (support.max_q_per_kv == 0 || c.q_heads / c.kv_heads <= support.max_q_per_kv);
}

std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  for (const std::string& name : attention_backend_names()) {
    for (const AttentionCase& c : cases()) {
      if (supports(find_attention_backend(name), c)) out.push_back({name, c});
    }
  }
#if PAGODA_HAVE_CUDA
  // The CUDA prefill rows of heads 128 and 256 under each CTA shape: masks, windows, sinks,
  // softcaps, DCP, padded rows and pages, e4m3 pages.
  const std::vector<std::string> prefills = {"llama nhd",
                                             "padded pages 128",
                                             "sliding softcap sinks 256",
                                             "prefill chunks",
                                             "dcp prefill window rows without keys",
                                             "heads 128/128",
                                             "heads 256/256",
                                             "fp8 llama nhd",
                                             "fp8 prefill chunks",
                                             "fp8 sliding softcap sinks 256"};
  size_t matched = 0;
  for (const AttentionCase& c : cases()) {
    if (std::find(prefills.begin(), prefills.end(), c.label) == prefills.end()) continue;
    ++matched;
    for (const cuda::PrefillCtas ctas : cuda::kPrefillCtasShapes) {
      // Each by name, the default's too: which CTAs kDefault runs depends on the step's shape.
      if (!cuda::prefill_ctas_available(ctas, c.head_k, c.head_v, c.cache_dtype)) continue;
      AttentionCase variant = c;
      variant.label += std::string(" prefill ctas ") + std::string(cuda::prefill_ctas_name(ctas));
      out.push_back({"cuda", variant, static_cast<int>(ctas)});
    }
  }
  if (matched != prefills.size()) throw std::logic_error("a prefill case is missing");
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionTest, ::testing::ValuesIn(backend_cases()),
                         [](const ::testing::TestParamInfo<BackendCase>& info) {
                           std::string name = info.param.backend + "_" + info.param.c.label;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// Every head size a backend declares has a case above, so each is run.
TEST(AttentionTest, EveryDeclaredHeadSizeHasACase) {
  for (const std::string& name : attention_backend_names()) {
    for (const auto& sizes : find_attention_backend(name).support().head_sizes) {
      bool found = false;
      for (const BackendCase& bc : backend_cases())
        found = found || (bc.backend == name && std::pair{bc.c.head_k, bc.c.head_v} == sizes);
      EXPECT_TRUE(found) << name << " " << sizes.first << "/" << sizes.second;
    }
  }
}

}  // namespace
}  // namespace pagoda
