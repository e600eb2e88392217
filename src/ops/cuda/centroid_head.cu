// The Gemma 4 assistant's centroid-masked head on the device: one CTA per row picks the top
// centroids by score; one CTA per (row, chosen centroid) computes the logits of the tokens that
// centroid owns, a warp per token; then the smallest of all those logits minus one fills the rest
// of the vocabulary and the computed logits are scattered over it. Nothing comes back to the host,
// so a captured graph can hold it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "core/error.h"
#include "ops/cuda/ops.h"
#include "ops/ops.h"

namespace pagoda::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// The better of two (score, centroid) candidates: the higher score, on a tie the lower index.
// Taken centroids hold NaN, which never compares higher or equal.
__device__ __forceinline__ void keep_better(float& value, int& index, float other_value,
                                            int other_index) {
  if (other_value > value || (other_value == value && other_index < index)) {
    value = other_value;
    index = other_index;
  }
}

// chosen[row * top_k + i]: the centroid of the row's (i+1)-th highest score. blockIdx.x = row;
// the row's scores sit in shared memory, and each pick marks its centroid taken.
__global__ void top_centroids_kernel(const float* scores, int num_centroids, int top_k,
                                     int* chosen) {
  start_after_prior_kernels();
  extern __shared__ float row[];
  __shared__ float warp_value[kWarps];
  __shared__ int warp_index[kWarps];
  const float* source = scores + static_cast<int64_t>(blockIdx.x) * num_centroids;
  for (int c = threadIdx.x; c < num_centroids; c += kThreads)
    row[c] = source[c];
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  for (int k = 0; k < top_k; ++k) {
    float value = -INFINITY;
    int index = INT_MAX;
    for (int c = threadIdx.x; c < num_centroids; c += kThreads)
      keep_better(value, index, row[c], c);
    for (int offset = 16; offset > 0; offset /= 2) {
      keep_better(value, index, __shfl_xor_sync(0xffffffffu, value, offset),
                  __shfl_xor_sync(0xffffffffu, index, offset));
    }
    if (lane == 0) {
      warp_value[warp] = value;
      warp_index[warp] = index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w)
        keep_better(value, index, warp_value[w], warp_index[w]);
      // Only NaN scores left: the lowest centroid not yet taken.
      if (index == INT_MAX) {
        for (index = 0; index < num_centroids && isnan(row[index]);)
          ++index;
      }
      chosen[blockIdx.x * top_k + k] = index;
      row[index] = NAN;
    }
    __syncthreads();
  }
}

// For CTA (row, i): the logits of the tokens centroid chosen[row * top_k + i] owns, at
// values[(row * top_k + i) * per_centroid + j], and their ids in tokens[] likewise.
__global__ void centroid_logits_kernel(const bf16* hidden, const bf16* head, int64_t head_stride,
                                       int hidden_size, const int32_t* ordering, const int* chosen,
                                       int per_centroid, float* values, int32_t* tokens) {
  start_after_prior_kernels();
  extern __shared__ float x[];
  const int r = blockIdx.x;
  const int i = blockIdx.y;
  const int top_k = gridDim.y;
  for (int d = threadIdx.x; d < hidden_size; d += kThreads)
    x[d] = __bfloat162float(hidden[static_cast<int64_t>(r) * hidden_size + d]);
  __syncthreads();
  const int centroid = chosen[r * top_k + i];
  const int lane = threadIdx.x % 32;
  const int64_t out = (static_cast<int64_t>(r) * top_k + i) * per_centroid;
  for (int j = threadIdx.x / 32; j < per_centroid; j += kWarps) {
    const int32_t token = ordering[static_cast<int64_t>(centroid) * per_centroid + j];
    const bf16* w = head + token * head_stride;
    float dot = 0.0f;
    for (int d = lane * 8; d < hidden_size; d += 32 * 8) {
      const uint4 packed = *reinterpret_cast<const uint4*>(w + d);
      const bf16* v = reinterpret_cast<const bf16*>(&packed);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        dot += x[d + e] * __bfloat162float(v[e]);
    }
    for (int offset = 16; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) {
      values[out + j] = dot;
      tokens[out + j] = token;
    }
  }
}

// floor[0] = min(values) - 1, in one CTA.
__global__ void floor_kernel(const float* values, int64_t count, float* floor) {
  start_after_prior_kernels();
  __shared__ float warp_min[kWarps];
  float m = INFINITY;
  for (int64_t i = threadIdx.x; i < count; i += kThreads)
    m = fminf(m, values[i]);
  for (int offset = 16; offset > 0; offset /= 2)
    m = fminf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (threadIdx.x % 32 == 0) warp_min[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w)
      m = fminf(m, warp_min[w]);
    floor[0] = m - 1.0f;
  }
}

__global__ void fill_kernel(float* out, int64_t count, const float* floor) {
  start_after_prior_kernels();
  const float value = floor[0];
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads)
    out[i] = value;
}

// out[row, tokens[i]] = values[i], for the per_row selected logits of each row.
__global__ void scatter_kernel(const float* values, const int32_t* tokens, int64_t count,
                               int64_t per_row, int64_t vocab, float* out) {
  start_after_prior_kernels();
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * kThreads)
    out[(i / per_row) * vocab + tokens[i]] = values[i];
}

unsigned grid_for(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>((count + kThreads - 1) / kThreads, 4096));
}

}  // namespace

void centroid_masked_logits(const Tensor& hidden, const Tensor& lm_head, const Tensor& scores,
                            const Tensor& token_ordering, int64_t top_k, const Tensor& out) {
  const int64_t rows = hidden.size(0);
  const int64_t hidden_size = hidden.size(1);
  const int64_t vocab = lm_head.size(0);
  const int64_t num_centroids = scores.size(1);
  PAGODA_CHECK(hidden.dtype() == DType::kBF16 && lm_head.dtype() == DType::kBF16,
               "the centroid head takes bf16 hidden states and head");
  PAGODA_CHECK(scores.dtype() == DType::kF32 && scores.is_contiguous() && scores.size(0) == rows &&
                   out.dtype() == DType::kF32 && out.is_contiguous() && out.size(0) == rows &&
                   out.size(1) == vocab,
               "centroid head: scores [{}, C] and out [{}, {}] f32, contiguous", rows, rows, vocab);
  PAGODA_CHECK(token_ordering.dtype() == DType::kI32 && token_ordering.numel() == vocab,
               "centroid head: the token ordering is [{}] int32", vocab);
  PAGODA_CHECK(hidden.is_contiguous() && lm_head.stride(1) == 1 && hidden_size % 8 == 0 &&
                   lm_head.stride(0) % 8 == 0 && lm_head.size(1) == hidden_size,
               "centroid head: hidden {} and head rows must be contiguous multiples of 8",
               hidden_size);
  PAGODA_CHECK(vocab % num_centroids == 0 && top_k >= 1 && top_k <= num_centroids,
               "centroid head: {} centroids over {} tokens, top {}", num_centroids, vocab, top_k);
  PAGODA_CHECK(
      num_centroids <= ops::kCentroidHeadMaxWidth && hidden_size <= ops::kCentroidHeadMaxWidth,
      "centroid head: {} centroids or hidden size {} exceed shared memory", num_centroids,
      hidden_size);
  if (rows == 0) return;
  const int64_t per_centroid = vocab / num_centroids;
  const int64_t selected = rows * top_k * per_centroid;
  const Device device = hidden.device();
  const Tensor chosen = Tensor::uninitialized({rows * top_k}, DType::kI32, device);
  const Tensor values = Tensor::uninitialized({selected + 1}, DType::kF32, device);
  const Tensor tokens = Tensor::uninitialized({selected}, DType::kI32, device);
  float* floor = values.data<float>() + selected;
  const cudaStream_t s = stream();
  launch(top_centroids_kernel, static_cast<unsigned>(rows), kThreads,
         static_cast<size_t>(num_centroids) * 4, s, scores.data<float>(),
         static_cast<int>(num_centroids), static_cast<int>(top_k), chosen.data<int32_t>());
  launch(centroid_logits_kernel, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(top_k)),
         kThreads, static_cast<size_t>(hidden_size) * 4, s,
         reinterpret_cast<const bf16*>(hidden.raw_data()),
         reinterpret_cast<const bf16*>(lm_head.raw_data()), lm_head.stride(0),
         static_cast<int>(hidden_size), token_ordering.data<int32_t>(), chosen.data<int32_t>(),
         static_cast<int>(per_centroid), values.data<float>(), tokens.data<int32_t>());
  launch(floor_kernel, 1, kThreads, 0, s, static_cast<const float*>(values.data<float>()), selected,
         floor);
  launch(fill_kernel, grid_for(rows * vocab), kThreads, 0, s, out.data<float>(), rows * vocab,
         static_cast<const float*>(floor));
  launch(scatter_kernel, grid_for(selected), kThreads, 0, s,
         static_cast<const float*>(values.data<float>()),
         static_cast<const int32_t*>(tokens.data<int32_t>()), selected, top_k * per_centroid, vocab,
         out.data<float>());
}

}  // namespace pagoda::cuda
