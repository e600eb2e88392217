// A projection's weight: a plain tensor, or FP8 values with the scales that dequantize them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace pagoda {

// values: [N, K]. Unquantized values are f32, f16 or bf16 and `scales` is undefined. FP8 (e4m3)
// values come with f32 `scales` [ceil(N / block_rows), ceil(K / block_cols)] on the same device:
// element (n, k) is values[n, k] * scales[n / block_rows, k / block_cols]. A checkpoint's 128 × 128
// blocks, per-tensor scaling (one block of N × K) and per-row groups (block_rows 1) are all this
// form.
struct Weight {
  Tensor values;
  Tensor scales;
  int64_t block_rows = 0;
  int64_t block_cols = 0;

  Weight() = default;
  Weight(Tensor plain) : values(std::move(plain)) {}  // NOLINT: an unquantized weight is a tensor
  Weight(Tensor fp8_values, Tensor block_scales, int64_t rows_per_block, int64_t cols_per_block);

  bool defined() const { return values.defined(); }
  bool quantized() const { return scales.defined(); }
  int64_t rows() const { return values.size(0); }
  int64_t cols() const { return values.size(1); }
  Device device() const { return values.device(); }
  // Bytes held: values and scales.
  int64_t bytes() const;

  // Rows [start, start + length). The scales stay shared when `start` is on a block boundary;
  // otherwise they are expanded to one row each (block_rows 1), in a new tensor.
  Weight narrow_rows(int64_t start, int64_t length) const;
  // The same weight with one scale row per weight row (block_rows 1).
  Weight with_row_scales() const;
  // A contiguous copy on `device`.
  Weight to(Device device) const;
};

// Whether stack_rows() takes these weights: the same columns and dtype, and for FP8 the same
// block_cols. (A checkpoint may leave some of a layer's projections unquantized.)
bool can_stack_rows(const std::vector<Weight>& weights);
// Rows [a; b; ...] of weights that can_stack_rows() in one weight on their device, so one GEMM
// computes every product. FP8 scales are stacked as they are when every part but the last fills
// whole row blocks, else expanded to one row each.
Weight stack_rows(const std::vector<Weight>& weights);

// The FP8 weight of host values [N, K] (any floating dtype) in blocks of block_rows × block_cols:
// each block's scale is its largest magnitude / 448 (1 for an all-zero block), and each value is
// rounded to nearest e4m3 after dividing by its block's scale.
Weight quantize_fp8(const Tensor& values, int64_t block_rows, int64_t block_cols);

// Rows [first, first + count) of a host FP8 weight, dequantized into out (count × K f32).
void dequantize_rows(const Weight& weight, int64_t first, int64_t count, float* out);

}  // namespace pagoda
