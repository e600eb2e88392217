// Elementwise and row-wise CPU ops on f32 activations. Rows run in parallel on the global pool.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/activation.h"

namespace pagoda::cpu {

// out[t] = table[ids[t]] widened to f32. table: [vocab, hidden] f32/f16/bf16; out: [T, hidden].
// Throws Error when an id is outside the vocabulary.
void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& out);

// out = x / rms(x) * (weight + weight_offset) over the last dim. x, out: [rows, dim] (may alias);
// weight: [dim] any float dtype, or undefined for a norm without scale. weight_offset is 0 for
// Llama- and Gemma 4-style norms, 1 for Gemma 1-3 style (1 + weight).
void rms_norm(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out);

// x += y, both [rows, dim] contiguous f32.
void add_in_place(const Tensor& x, const Tensor& y);

// out = act(gate) * up, elementwise. gate, up, out: [T, I] (out may alias either).
using pagoda::Activation;
void gated_activation(Activation activation, const Tensor& gate, const Tensor& up,
                      const Tensor& out);

// x = cap * tanh(x / cap), elementwise over a contiguous f32 tensor.
void softcap_in_place(const Tensor& x, float cap);

// Row-wise log-softmax of logits [rows, vocab] into out (may alias).
void log_softmax(const Tensor& logits, const Tensor& out);

// The Gemma 4 assistant's centroid-masked head (see ops::centroid_masked_logits). hidden
// [rows, H] f32; lm_head [vocab, H]; scores [rows, C] f32; token_ordering [vocab] int32; out
// [rows, vocab] f32, contiguous.
void centroid_masked_logits(const Tensor& hidden, const Tensor& lm_head, const Tensor& scores,
                            const Tensor& token_ordering, int64_t top_k, const Tensor& out);

// One element of a float tensor of any dtype as f32, and back (narrowing as dtype.h's conversions).
float load_float(const std::byte* element, DType dtype);
void store_float(std::byte* element, DType dtype, float value);
// `count` consecutive elements of `dtype` from `src`, widened and times `scale`, into `out`: the
// dtype is looked at once per row rather than once per element.
void load_floats(const std::byte* src, DType dtype, int64_t count, float scale, float* out);
// Every element of a contiguous float tensor (small ones: scales, biases, sinks) as f32.
std::vector<float> to_floats(const Tensor& t);

}  // namespace pagoda::cpu
