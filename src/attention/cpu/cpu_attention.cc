#include "attention/cpu/cpu_attention.h"

#include <cmath>
#include <limits>
#include <tuple>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

// Writes K and V of real rows into the cache at their slots, times 1 / their cache scales.
void write_cache(const AttentionLayerParams& p, const Tensor& key, const Tensor& value,
                 const KvCacheView& cache, const AttentionMetadata& metadata) {
  const int64_t block_size = cache.key.size(1);
  const int64_t heads = cache.key.size(2);
  const DType dtype = cache.key.dtype();
  const int64_t element = dtype_size(dtype);
  const float k_inverse = 1.0f / cache_scale(dtype, p.k_scale);
  const float v_inverse = 1.0f / cache_scale(dtype, p.v_scale);
  for (int64_t t = 0; t < metadata.num_actual_tokens; ++t) {
    const int64_t slot = metadata.slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / block_size;
    const int64_t offset = slot % block_size;
    PAGODA_CHECK(block < cache.key.size(0), "slot {} is past the cache's blocks", slot);
    for (const auto& [source, view, inverse] :
         {std::tuple{&key, &cache.key, k_inverse}, std::tuple{&value, &cache.value, v_inverse}}) {
      const int64_t dim = view->size(3);
      for (int64_t h = 0; h < heads; ++h) {
        const float* row = source->data<float>() + t * source->stride(0) + h * source->stride(1);
        std::byte* dst =
            view->raw_data() +
            (block * view->stride(0) + offset * view->stride(1) + h * view->stride(2)) * element;
        for (int64_t d = 0; d < dim; ++d)
          cpu::store_float(dst + d * element, dtype, row[d] * inverse);
      }
    }
  }
}

// One query row of one head against its sequence's cached keys (this rank's share of them).
// Returns the log-sum-exp of the scores.
float attend(const AttentionLayerParams& p, const float* q, int64_t kv_head, int64_t q_head,
             int64_t position, const int32_t* block_row, const KvCacheView& cache,
             const ContextShard& context, std::vector<float>& scores, std::vector<float>& key_row,
             float* out) {
  const int64_t block_size = cache.key.size(1);
  const DType dtype = cache.key.dtype();
  const int64_t element = dtype_size(dtype);
  const int64_t first =
      p.sliding_window > 0 ? std::max<int64_t>(0, position - p.sliding_window + 1) : 0;
  scores.clear();
  key_row.resize(std::max(p.head_size_k, p.head_size_v));
  // The cached row of an owned position, times the cache's scale.
  auto load_row = [&](const Tensor& view, int64_t position, int64_t dim, float scale) {
    const int64_t local = context.local_index(position);
    const int64_t block = block_row[local / block_size];
    const std::byte* src =
        view.raw_data() + (block * view.stride(0) + (local % block_size) * view.stride(1) +
                           kv_head * view.stride(2)) *
                              element;
    cpu::load_floats(src, dtype, dim, scale, key_row.data());
  };
  const float k_scale = cache_scale(dtype, p.k_scale);
  const float v_scale = cache_scale(dtype, p.v_scale);
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float max = p.sinks != nullptr ? p.sinks[q_head] : kNone;
  for (int64_t key = first; key <= position; ++key) {
    if (!context.owns(key)) continue;
    load_row(cache.key, key, p.head_size_k, k_scale);
    float dot = 0.0f;
    for (int64_t d = 0; d < p.head_size_k; ++d)
      dot += q[d] * key_row[d];
    float score = dot * p.scale;
    if (p.logit_softcap > 0.0f) score = p.logit_softcap * std::tanh(score / p.logit_softcap);
    scores.push_back(score);
    max = std::max(max, score);
  }
  for (int64_t d = 0; d < p.head_size_v; ++d)
    out[d] = 0.0f;
  if (max == kNone) return kNone;
  float sum = p.sinks != nullptr ? std::exp(p.sinks[q_head] - max) : 0.0f;
  for (float& score : scores) {
    score = std::exp(score - max);
    sum += score;
  }
  size_t j = 0;
  for (int64_t key = first; key <= position; ++key) {
    if (!context.owns(key)) continue;
    load_row(cache.value, key, p.head_size_v, v_scale);
    const float weight = scores[j++] / sum;
    for (int64_t d = 0; d < p.head_size_v; ++d)
      out[d] += weight * key_row[d];
  }
  return max + std::log(sum);
}

}  // namespace

void cpu_paged_attention(const AttentionLayerParams& params, const Tensor& query, const Tensor& key,
                         const Tensor& value, const KvCacheView& cache,
                         const AttentionMetadata& metadata, const Tensor& output) {
  PAGODA_CHECK(key.defined() == value.defined(), "key and value must both be given or absent");
  PAGODA_CHECK(params.num_q_heads % params.num_kv_heads == 0, "GQA ratio");
  PAGODA_CHECK(query.dim() == 3 && query.stride(2) == 1 && query.dtype() == DType::kF32,
               "query must be [T, Hq, Dk] f32");
  PAGODA_CHECK(output.is_contiguous() && output.dtype() == DType::kF32, "output must be f32");
  PAGODA_CHECK(
      cache.key.size(2) == params.num_kv_heads && cache.key.size(3) == params.head_size_k &&
          cache.value.size(3) == params.head_size_v,
      "cache view {} / {} does not match the layer", cache.key.shape(), cache.value.shape());
  if (key.defined()) write_cache(params, key, value, cache, metadata);

  const int64_t group = params.num_q_heads / params.num_kv_heads;
  const int64_t num_seqs = metadata.num_seqs();
  // Sequence of each real row, and its absolute position.
  std::vector<int64_t> row_seq(metadata.num_actual_tokens);
  std::vector<int64_t> row_position(metadata.num_actual_tokens);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t begin = metadata.query_start[s];
    const int64_t end = metadata.query_start[s + 1];
    const int64_t first_position = metadata.seq_lens[s] - (end - begin);
    for (int64_t t = begin; t < end && t < metadata.num_actual_tokens; ++t) {
      row_seq[t] = s;
      row_position[t] = first_position + (t - begin);
    }
  }
  const int64_t work = metadata.num_actual_tokens * params.num_q_heads;
  ThreadPool::global().parallel_for(work, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<float> row;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / params.num_q_heads;
      const int64_t h = item % params.num_q_heads;
      const float* q = query.data<float>() + t * query.stride(0) + h * query.stride(1);
      const int32_t* block_row = metadata.blocks_of(row_seq[t]);
      float* out = output.data<float>() + t * params.num_q_heads * params.head_size_v +
                   h * params.head_size_v;
      const float lse = attend(params, q, h / group, h, row_position[t], block_row, cache,
                               metadata.context, scores, row, out);
      if (params.lse != nullptr) params.lse[t * params.num_q_heads + h] = lse;
    }
  });
}

}  // namespace pagoda
