// The ops the architectures call, dispatched on the device of their tensors: cpu:: on the host
// (f32 activations), cuda:: on a GPU (bf16 activations, queued on the engine stream). A build
// without CUDA throws Error for device tensors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/norm_params.h"
#include "ops/sampling_row.h"
#include "ops/weight.h"

namespace pagoda::ops {

// The dtype activations have on `device`: f32 on the CPU, bf16 on a GPU.
DType activation_dtype(Device device);

// A new uninitialized activation tensor of `shape` on x's device and in x's dtype.
Tensor like(const Tensor& x, const Shape& shape);

// out[t] = table[ids[t]] * scale. The CPU reads `ids`; a GPU reads `device_ids` ([T] int32 on the
// device). Throws Error for an id outside the vocabulary (checked on the host).
void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& device_ids,
               float scale, const Tensor& out);

// [rows, N] = x[rows, K] · weight[N, K]ᵀ, in x's dtype, or f32 with `out_dtype`. An FP8 weight is
// dequantized by its scales; activations stay in their dtype.
Tensor linear(const Tensor& x, const Weight& weight);
Tensor linear(const Tensor& x, const Weight& weight, DType out_dtype);
// act(x · weightᵀ) · up, up [T, weight rows] in x's dtype: one launch on a GPU for one row of a
// bf16 weight (Gemma 4's per-layer-input gate at batch 1), a linear and a gated_activation
// otherwise.
Tensor gated_linear(const Tensor& x, const Weight& weight, Activation activation, const Tensor& up);

// act(gate) · up where [gate; up] = x · gate_upᵀ (gate_up: [2n, K], the gate's rows first):
// [T, n] in x's dtype. One launch on a GPU for one row of x where cuda::paired_gated_applies(); a
// linear and a gated_activation otherwise.
Tensor paired_gated_linear(const Tensor& x, const Weight& gate_up, Activation activation);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out);
// residual += x; out = rms_norm(residual): one pass on a GPU.
void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                  float weight_offset, const Tensor& out);
// residual = (residual + rms_norm(x, x_norm)) * scale; then, unless out is undefined,
// out = rms_norm(residual, out_norm). One pass on a GPU for what Gemma does after each block: the
// block's output norm, the residual add, the layer scalar and the next block's input norm.
void add_normed(const Tensor& residual, const Tensor& x, const RmsNormParams& x_norm, float scale,
                const RmsNormParams& out_norm, const Tensor& out);
void add_in_place(const Tensor& x, const Tensor& y);
void scale_in_place(const Tensor& x, float factor);
void softcap_in_place(const Tensor& x, float cap);
void gated_activation(Activation activation, const Tensor& gate, const Tensor& up,
                      const Tensor& out);

// NeoX rotation of x [T, heads, head_size] in place. The CPU uses the host frequencies and
// positions; a GPU the device copies ([rotary_dim / 2] f32, [>= T] int64).
void rope(const std::vector<float>& inverse_frequencies, const Tensor& device_frequencies,
          int64_t rotary_dim, const std::vector<int64_t>& positions, const Tensor& device_positions,
          const Tensor& x);
// rms_norm of each head of x over head_size, then the rotation above (none with rotary_dim 0):
// per-head q/k norms and RoPE in one pass on a GPU, where x's tokens and heads may be strided.
void norm_rope(const RmsNormParams& norm, const std::vector<float>& inverse_frequencies,
               const Tensor& device_frequencies, int64_t rotary_dim,
               const std::vector<int64_t>& positions, const Tensor& device_positions,
               const Tensor& x);
// norm_rope of up to kMaxRopeParts tensors of the same tokens (a layer's q, k and v), in one
// launch on a GPU.
void norm_rope(std::span<const NormRopePart> parts, const std::vector<float>& inverse_frequencies,
               const Tensor& device_frequencies, int64_t rotary_dim,
               const std::vector<int64_t>& positions, const Tensor& device_positions);

// The Gemma 4 assistant's centroid-masked head: per row of hidden [rows, H], the top_k centroids
// by scores [rows, C] (f32; ties by the lower index) each own vocab / C tokens, listed in
// token_ordering ([vocab] int32, on hidden's device); those tokens get their logits hidden ·
// lm_head[token], every other token the smallest of all rows' computed logits minus one.
// Returns [rows, vocab] f32.
Tensor centroid_masked_logits(const Tensor& hidden, const Tensor& lm_head, const Tensor& scores,
                              const Tensor& token_ordering, int64_t top_k);
// Error unless the centroid head runs on `device` with `num_centroids` centroids over rows of
// `hidden_size`: the GPU kernel holds a row's scores and hidden state in shared memory (12288 of
// each at most; the hidden size a multiple of 8). For loaders, before any step.
void check_centroid_head(int64_t num_centroids, int64_t hidden_size, Device device);
// The widest score or hidden row the GPU centroid head holds: 48 KiB of f32, the shared memory a
// launch gets without opting in.
inline constexpr int64_t kCentroidHeadMaxWidth = 48 * 1024 / 4;

// On a GPU: ids[r] and logprobs[r], the token row r of logits [rows, vocab] f32 gives with
// rows[r]'s parameters and draw, and its raw log-probability ([rows] int32 and f32, on the
// device). Rows that judge drafts also say in kept[r] whether they keep them, judging sampling
// rows against draft_logits (see cuda::sample). Host logits are sampled by the engine's Sampler
// (engine/sampler.h), not here.
void sample(const Tensor& logits, std::span<const SamplingRow> rows, const Tensor& ids,
            const Tensor& logprobs, const Tensor& kept = Tensor(),
            const Tensor& draft_logits = Tensor());

}  // namespace pagoda::ops
