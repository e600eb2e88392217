#include "ops/cpu/matmul.h"

#include <cblas.h>

#include <mutex>
#include <vector>

#include "core/thread_pool.h"

namespace pagoda::cpu {
namespace {

// OpenBLAS runs each call on its own threads; calls from several threads at once (the ranks of an
// in-process tensor-parallel group) take turns, each still using every core.
std::mutex blas_mutex;

void sgemm(int64_t m, int64_t n, int64_t k, const float* x, const float* weight, float* out,
           int64_t out_stride) {
  const std::lock_guard lock(blas_mutex);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x, static_cast<int>(k), weight, static_cast<int>(k), 0.0f,
              out, static_cast<int>(out_stride));
}

constexpr int64_t kTileElements = int64_t{1} << 20;  // 4 MiB of f32 per widened tile

void widen_rows(const Weight& quantized, int64_t first_row, int64_t rows, float* out) {
  if (quantized.quantized()) return dequantize_rows(quantized, first_row, rows, out);
  const Tensor& weight = quantized.values;
  const int64_t k = weight.size(1);
  const uint16_t* source = weight.data<uint16_t>() + first_row * k;
  const bool bf16 = weight.dtype() == DType::kBF16;
  ThreadPool::global().parallel_for(rows * k, [&](int64_t begin, int64_t end) {
    if (bf16) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = bf16_to_f32(source[i]);
    } else {
      for (int64_t i = begin; i < end; ++i)
        out[i] = f16_to_f32(source[i]);
    }
  });
}

}  // namespace

void linear(const Tensor& x, const Weight& quantized, const Tensor& out) {
  const Tensor& weight = quantized.values;
  PAGODA_CHECK(x.dim() == 2 && weight.dim() == 2 && out.dim() == 2, "linear needs 2-D tensors");
  const int64_t m = x.size(0);
  const int64_t k = x.size(1);
  const int64_t n = weight.size(0);
  PAGODA_CHECK(weight.size(1) == k && out.size(0) == m && out.size(1) == n,
               "linear shapes x {} weight {} out {}", x.shape(), weight.shape(), out.shape());
  PAGODA_CHECK(x.dtype() == DType::kF32 && out.dtype() == DType::kF32, "linear computes in f32");
  PAGODA_CHECK(x.is_contiguous() && weight.is_contiguous() && out.is_contiguous(),
               "linear needs contiguous tensors");
  if (m == 0 || n == 0) return;
  if (weight.dtype() == DType::kF32) {
    sgemm(m, n, k, x.data<float>(), weight.data<float>(), out.data<float>(), n);
    return;
  }
  PAGODA_CHECK(weight.dtype() == DType::kBF16 || weight.dtype() == DType::kF16 ||
                   (weight.dtype() == DType::kF8E4M3 && quantized.quantized()),
               "linear weight dtype {}", dtype_name(weight.dtype()));
  const int64_t tile_rows =
      std::max<int64_t>(1, std::min(n, kTileElements / std::max<int64_t>(k, 1)));
  std::vector<float> tile(tile_rows * k);
  for (int64_t row = 0; row < n; row += tile_rows) {
    const int64_t rows = std::min(tile_rows, n - row);
    widen_rows(quantized, row, rows, tile.data());
    sgemm(m, rows, k, x.data<float>(), tile.data(), out.data<float>() + row, n);
  }
}

}  // namespace pagoda::cpu
