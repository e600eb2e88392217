#include "ops/weight.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

int64_t blocks_of(int64_t size, int64_t block) {
  return (size + block - 1) / block;
}

// [a; b; ...] of 2-D tensors with one dtype and width, on the first one's device.
Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& part : parts)
    rows += part.size(0);
  Tensor out = Tensor::uninitialized({rows, parts[0].size(1)}, parts[0].dtype(), parts[0].device());
  int64_t row = 0;
  for (const Tensor& part : parts) {
    out.narrow(0, row, part.size(0)).copy_from(part);
    row += part.size(0);
  }
  return out;
}

}  // namespace

Weight::Weight(Tensor fp8_values, Tensor block_scales, int64_t rows_per_block,
               int64_t cols_per_block)
    : values(std::move(fp8_values)),
      scales(std::move(block_scales)),
      block_rows(rows_per_block),
      block_cols(cols_per_block) {
  PAGODA_CHECK(values.dim() == 2 && values.dtype() == DType::kF8E4M3,
               "an FP8 weight needs 2-D e4m3 values; got {} {}", dtype_name(values.dtype()),
               values.shape());
  PAGODA_CHECK(block_rows > 0 && block_cols > 0, "FP8 blocks of {} x {}", block_rows, block_cols);
  const Shape expected{blocks_of(rows(), block_rows), blocks_of(cols(), block_cols)};
  PAGODA_CHECK(scales.dtype() == DType::kF32 && scales.shape() == expected &&
                   scales.is_contiguous() && scales.device() == values.device(),
               "FP8 scales {} {} for values {} in blocks of {} x {}", dtype_name(scales.dtype()),
               scales.shape(), values.shape(), block_rows, block_cols);
}

int64_t Weight::bytes() const {
  int64_t total = values.numel() * values.element_size();
  if (quantized()) total += scales.numel() * scales.element_size();
  return total;
}

Weight Weight::narrow_rows(int64_t start, int64_t length) const {
  if (!quantized()) return Weight(values.narrow(0, start, length));
  if (start % block_rows != 0) return with_row_scales().narrow_rows(start, length);
  const int64_t first = start / block_rows;
  const int64_t count = blocks_of(start + length, block_rows) - first;
  return Weight(values.narrow(0, start, length), scales.narrow(0, first, count), block_rows,
                block_cols);
}

Weight Weight::with_row_scales() const {
  PAGODA_CHECK(quantized(), "row scales of an unquantized weight");
  if (block_rows == 1) return *this;
  const Tensor blocks = scales.to(Device::cpu());
  const int64_t width = blocks.size(1);
  Tensor rows_scales = Tensor::empty({rows(), width}, DType::kF32);
  for (int64_t r = 0; r < rows(); ++r) {
    std::copy_n(blocks.data<float>() + r / block_rows * width, width,
                rows_scales.data<float>() + r * width);
  }
  if (!device().is_cpu()) rows_scales = rows_scales.to(device());
  return Weight(values, rows_scales, 1, block_cols);
}

Weight Weight::to(Device device) const {
  if (!quantized()) return Weight(values.to(device));
  return Weight(values.to(device), scales.to(device), block_rows, block_cols);
}

bool can_stack_rows(const std::vector<Weight>& weights) {
  if (weights.empty()) return false;
  const Weight& head = weights.front();
  for (const Weight& w : weights) {
    if (w.cols() != head.cols() || w.values.dtype() != head.values.dtype() ||
        w.quantized() != head.quantized() || w.block_cols != head.block_cols) {
      return false;
    }
  }
  return true;
}

Weight stack_rows(const std::vector<Weight>& weights) {
  PAGODA_CHECK(can_stack_rows(weights), "stack_rows of weights that do not stack");
  const Weight& head = weights.front();
  // Whether the parts' scales stack as they are: row blocks of one size, which every part but the
  // last fills whole. (A last part with other blocks, a per-tensor scale say, does not.)
  bool aligned = true;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Weight& w = weights[i];
    if (!w.quantized()) continue;
    if (w.block_rows != head.block_rows) aligned = false;
    if (i + 1 < weights.size() && w.rows() % w.block_rows != 0) aligned = false;
  }
  std::vector<Tensor> values;
  std::vector<Tensor> scales;
  for (const Weight& w : weights) {
    values.push_back(w.values);
    if (w.quantized()) scales.push_back((aligned ? w : w.with_row_scales()).scales);
  }
  if (!head.quantized()) return Weight(concat_rows(values));
  return Weight(concat_rows(values), concat_rows(scales), aligned ? head.block_rows : 1,
                head.block_cols);
}

Weight quantize_fp8(const Tensor& source, int64_t block_rows, int64_t block_cols) {
  PAGODA_CHECK(source.dim() == 2 && source.device().is_cpu() && is_floating(source.dtype()),
               "quantize_fp8 takes a 2-D floating host tensor; got {} {}",
               dtype_name(source.dtype()), source.shape());
  PAGODA_CHECK(block_rows > 0 && block_cols > 0, "FP8 blocks of {} x {}", block_rows, block_cols);
  const Tensor values = source.contiguous();
  const int64_t n = values.size(0);
  const int64_t k = values.size(1);
  const int64_t row_blocks = blocks_of(n, block_rows);
  const int64_t col_blocks = blocks_of(k, block_cols);
  Tensor quantized = Tensor::empty({n, k}, DType::kF8E4M3);
  Tensor scales = Tensor::empty({row_blocks, col_blocks}, DType::kF32);
  const auto* in = values.raw_data();
  const int64_t size = values.element_size();
  auto* out = quantized.data<uint8_t>();
  ThreadPool::global().parallel_for(row_blocks * col_blocks, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t r0 = b / col_blocks * block_rows;
      const int64_t c0 = b % col_blocks * block_cols;
      const int64_t r1 = std::min(n, r0 + block_rows);
      const int64_t c1 = std::min(k, c0 + block_cols);
      float largest = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c)
          largest = std::max(largest,
                             std::fabs(cpu::load_float(in + (r * k + c) * size, values.dtype())));
      }
      const float scale = largest > 0.0f ? largest / kE4m3Max : 1.0f;
      scales.data<float>()[b] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          out[r * k + c] =
              f32_to_e4m3(cpu::load_float(in + (r * k + c) * size, values.dtype()) / scale);
        }
      }
    }
  });
  return Weight(quantized, scales, block_rows, block_cols);
}

void dequantize_rows(const Weight& weight, int64_t first, int64_t count, float* out) {
  PAGODA_CHECK(weight.quantized() && weight.device().is_cpu() && weight.values.is_contiguous(),
               "dequantize_rows needs a contiguous host FP8 weight");
  const int64_t k = weight.cols();
  const int64_t width = weight.scales.size(1);
  const uint8_t* values = weight.values.data<uint8_t>();
  const float* scales = weight.scales.data<float>();
  ThreadPool::global().parallel_for(count, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = first + i;
      const float* row_scales = scales + row / weight.block_rows * width;
      for (int64_t c = 0; c < k; ++c)
        out[i * k + c] = e4m3_to_f32(values[row * k + c]) * row_scales[c / weight.block_cols];
    }
  });
}

}  // namespace pagoda
