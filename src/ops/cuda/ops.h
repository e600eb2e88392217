// Elementwise, row-wise and matrix ops on CUDA tensors. Every op queues work on cuda::stream() of
// the tensors' device and returns without waiting. Activations are bf16 or f32; weights are bf16,
// f16 or f32. Shapes are checked with PAGODA_CHECK; an unsupported dtype is an Error naming it.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/norm_params.h"
#include "ops/sampling_row.h"
#include "ops/weight.h"

namespace pagoda::cuda {

// out[t] = table[ids[t]] * scale. table: [vocab, hidden]; ids: [T] int32 on the device; out:
// [T, hidden]. An id outside the vocabulary writes a zero row (ids are checked on the host).
void embedding(const Tensor& table, const Tensor& ids, float scale, const Tensor& out);

// out = x / rms(x) * (weight + weight_offset) over the last dim, computed in f32. x, out:
// [rows, dim] with unit inner stride (rows may be strided; out may alias x); weight: [dim] or
// undefined for a norm without scale.
void rms_norm(const Tensor& x, const Tensor& weight, float eps, float weight_offset,
              const Tensor& out);

// residual += x; out = rms_norm(residual). One pass: residual, x, out: [rows, dim] contiguous.
void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                  float weight_offset, const Tensor& out);

// residual = (residual + rms_norm(x, x_norm)) * scale; then, unless out is undefined,
// out = rms_norm(residual, out_norm). One pass; each step rounds to the activation dtype as the
// separate ops do. residual, x, out: [rows, dim] contiguous, one dtype; x is left as it was.
void add_normed(const Tensor& residual, const Tensor& x, const RmsNormParams& x_norm, float scale,
                const RmsNormParams& out_norm, const Tensor& out);

// x += y, both [rows, dim] contiguous, same dtype.
void add_in_place(const Tensor& x, const Tensor& y);
// x *= factor, contiguous.
void scale_in_place(const Tensor& x, float factor);
// x = cap * tanh(x / cap), contiguous.
void softcap_in_place(const Tensor& x, float cap);

// out = act(gate) * up. gate, up, out: [T, I] with unit inner stride (out may alias gate).
void gated_activation(Activation activation, const Tensor& gate, const Tensor& up,
                      const Tensor& out);

// Rotates x [T, heads, head_size] (unit inner stride) in place, NeoX style: dim i pairs with
// i + rotary_dim / 2 for i < rotary_dim / 2. inverse_frequencies: [rotary_dim / 2] f32 on the
// device; positions: [>= T] int64 on the device. Angles are computed in f32 as the CPU does.
void rope(const Tensor& inverse_frequencies, int64_t rotary_dim, const Tensor& positions,
          const Tensor& x);
// rms_norm of each head of x over head_size (rounded as rms_norm stores it), then rope, in one
// pass. x's tokens and heads may be strided; rotary_dim 0 normalises only.
void norm_rope(const RmsNormParams& norm, const Tensor& inverse_frequencies, int64_t rotary_dim,
               const Tensor& positions, const Tensor& x);
// The same over up to kMaxRopeParts tensors of the same tokens and dtype, in one launch.
void norm_rope(std::span<const NormRopePart> parts, const Tensor& inverse_frequencies,
               int64_t rotary_dim, const Tensor& positions);

// out[M, N] = x[M, K] · weight[N, K]ᵀ with f32 accumulation. x and weight are bf16 with unit
// inner stride; out is bf16 or f32, contiguous. Few rows may take the matrix-vector kernel below
// when it is the faster; the rest go through cuBLASLt (cublaslt_linear). An FP8 weight takes one
// of the FP8 paths below.
void linear(const Tensor& x, const Weight& weight, const Tensor& out);
void cublaslt_linear(const Tensor& x, const Tensor& weight, const Tensor& out);

// linear() for at most kMaxGemvRows rows of x as matrix-vector products (the weight read once,
// no tensor cores): what linear() uses for such x when gemv_applies() (16-byte aligned rows, K a
// multiple of 8).
constexpr int64_t kMaxGemvRows = 4;
bool gemv_applies(const Tensor& x, const Tensor& weight, const Tensor& out);
void gemv(const Tensor& x, const Tensor& weight, const Tensor& out);
// out = act(x · weightᵀ) · up (bf16, up [M, N] with strided rows) where gemv applies: one launch
// for a projection and the gated activation that follows it, as separate launches would round.
void gated_gemv(const Tensor& x, const Tensor& weight, Activation activation, const Tensor& up,
                const Tensor& out);
// out = act(x · weightᵀ) · up: gated_gemv for one row of a bf16 weight (Gemma 4's
// per-layer-input gate at batch 1), else linear and then gated_activation.
void gated_linear(const Tensor& x, const Weight& weight, Activation activation, const Tensor& up,
                  const Tensor& out);
// Whether paired_gated_linear() (below) may run: PAGODA_FUSED unset or 1; 0 turns it off, so one
// binary can be timed both ways.
bool fused_launches();

// out = act(gate) · up for [gate; up] = x · gate_upᵀ, gate_up [2n, K] with the gate's rows first
// and out [M, n] bf16, in one launch: each warp group of the matrix-vector kernel reads a gate
// row and the up row n below it, and writes what linear() and then gated_activation() would.
// paired_gated_applies() says where: one row of x and a bf16 weight the CUDA-core GEMV takes
// (paired_gemv) or an FP8 one the FP8 GEMV takes (fp8_paired_gemv), all on x's device; never
// with PAGODA_FUSED=0.
bool paired_gated_applies(const Tensor& x, const Weight& gate_up, const Tensor& out);
void paired_gated_linear(const Tensor& x, const Weight& gate_up, Activation activation,
                         const Tensor& out);
bool paired_gemv_applies(const Tensor& x, const Tensor& gate_up, const Tensor& out);
void paired_gemv(const Tensor& x, const Tensor& gate_up, Activation activation, const Tensor& out);
void fp8_paired_gemv(const Tensor& x, const Weight& gate_up, Activation activation,
                     const Tensor& out);
// The same products on tensor cores, for at most kMaxMmaGemvRows rows of x (the weight still read
// once): where the few rows of a verify step or a small batch meet cuBLASLt. mma_gemv_applies()
// asks what gemv_applies() does, with its own row limit.
constexpr int64_t kMaxMmaGemvRows = 8;
bool mma_gemv_applies(const Tensor& x, const Tensor& weight, const Tensor& out);
void mma_gemv(const Tensor& x, const Tensor& weight, const Tensor& out);

// linear() with an FP8 weight, three ways (fp8_linear.cu), each of which throws Error for a weight
// it cannot read (K and block_cols multiples of 16 and 16-byte aligned rows are needed by all):
// - fp8_gemv: at most kMaxFp8GemvRows rows of x (16-byte aligned) as matrix-vector products that
//   apply the block scales in registers; fp8_mma_gemv does the same on tensor cores (16 weight
//   rows by up to 8 rows of x per product, x rounded to f16) for blocks of a multiple of 16 rows
//   and 64 columns (fp8_mma_gemv_applies); linear() runs the faster of the two there.
// - fp8_gemm: x quantized to e4m3 per row and group of 128 columns (scale: the group's largest
//   magnitude / 448), then cuBLASLt's FP8 tensor-core GEMM, for a weight in 128 x 128 blocks with
//   K a multiple of 128 (fp8_gemm_applies).
// - fp8_dequantized_linear: cuBLASLt on a bf16 scratch copy from dequantize(), for any weight.
// linear() takes the faster of the first two where both apply (timed once per shape), else the
// one that applies, else the third.
constexpr int64_t kMaxFp8GemvRows = 8;
void check_fp8_linear(const Tensor& x, const Weight& weight, const Tensor& out);
// The weight part of check_fp8_linear's conditions, as a test: K and block_cols multiples of 16,
// 16-byte aligned rows, fewer than 2^31 rows and columns.
bool fp8_weight_readable(const Weight& weight);
bool fp8_gemv_applies(const Tensor& x);
void fp8_gemv(const Tensor& x, const Weight& weight, const Tensor& out);
bool fp8_mma_gemv_applies(const Tensor& x, const Weight& weight);
void fp8_mma_gemv(const Tensor& x, const Weight& weight, const Tensor& out);
bool fp8_gemm_applies(const Tensor& x, const Weight& weight);
void fp8_gemm(const Tensor& x, const Weight& weight, const Tensor& out);
void fp8_dequantized_linear(const Tensor& x, const Weight& weight, const Tensor& out);
// out[M, N] = (xq · x_scales) · (weight · its scales)ᵀ on FP8 tensor cores: xq [M, K] e4m3,
// contiguous; x_scales [K / 128, M] f32, one per row and group of 128 columns; weight in
// 128 x 128 blocks.
void cublaslt_fp8_linear(const Tensor& xq, const Tensor& x_scales, const Weight& weight,
                         const Tensor& out);
// The bf16 matrix an FP8 weight stands for, in a new tensor on its device.
Tensor dequantize(const Weight& weight);

// ids[r] = the token sample_token() picks from logits row r with rows[r]'s parameters and draw
// (a greedy row's argmax, the lowest id among equal maxima), and logprobs[r] its log-probability
// under the raw logits. logits: [rows, vocab] f32, contiguous; ids: [rows] int32; logprobs:
// [rows] f32. A row that judges a draft does what accept_drafts() does at that draft: kept[r]
// ([rows] int32, needed when any row judges one) says whether it keeps the draft, and ids[r] is
// then the draft, else the token drawn in its place (the argmax when greedy; the residual draw
// otherwise). draft_logits [drafts, vocab] f32 holds the drafter's rows that sampling rows judge
// against.
void sample(const Tensor& logits, std::span<const SamplingRow> rows, const Tensor& ids,
            const Tensor& logprobs, const Tensor& kept = Tensor(),
            const Tensor& draft_logits = Tensor());

// The Gemma 4 assistant's centroid-masked head (see ops::centroid_masked_logits). hidden
// [rows, H] and lm_head [vocab, H] bf16 (H a multiple of 8); scores [rows, C] f32; token_ordering
// [vocab] int32; out [rows, vocab] f32, contiguous.
void centroid_masked_logits(const Tensor& hidden, const Tensor& lm_head, const Tensor& scores,
                            const Tensor& token_ordering, int64_t top_k, const Tensor& out);

// dst = src converted elementwise; both contiguous, same shape; f32, f16 or bf16.
void convert(const Tensor& src, const Tensor& dst);

}  // namespace pagoda::cuda
