#include "ops/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/ops.h"

namespace pagoda::cpu {
namespace {

// OpenBLAS multiplies on the calling thread only: the pool's threads each take a share of a
// product's weight rows. Left to its own threads, OpenBLAS would have them spin (sched_yield)
// between calls, taking the cores the pool's threads need for everything else.
void use_calling_thread_only() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* x, const float* weight, float* out,
           int64_t out_stride) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x, static_cast<int>(k), weight, static_cast<int>(k), 0.0f,
              out, static_cast<int>(out_stride));
}

constexpr int64_t kTileElements = int64_t{1} << 18;  // 1 MiB of f32 per widened tile

// Rows [first_row, first_row + rows) of a bf16, f16 or FP8 weight as f32, on the calling thread.
void widen_rows(const Weight& quantized, int64_t first_row, int64_t rows, float* out) {
  if (quantized.quantized()) return dequantize_rows(quantized, first_row, rows, out);
  const Tensor& weight = quantized.values;
  const int64_t k = weight.size(1);
  load_floats(weight.raw_data() + first_row * k * weight.element_size(), weight.dtype(), rows * k,
              1.0f, out);
}

// A thread's widened tile of at least `elements` floats (one row may be longer than a tile), kept
// from one product to the next.
float* tile_of_this_thread(int64_t elements) {
  thread_local std::vector<float> tile;
  if (static_cast<int64_t>(tile.size()) < elements) tile.resize(static_cast<size_t>(elements));
  return tile.data();
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
  const bool widen = weight.dtype() != DType::kF32;
  PAGODA_CHECK(!widen || weight.dtype() == DType::kBF16 || weight.dtype() == DType::kF16 ||
                   (weight.dtype() == DType::kF8E4M3 && quantized.quantized()),
               "linear weight dtype {}", dtype_name(weight.dtype()));
  use_calling_thread_only();
  const float* in = x.data<float>();
  float* result = out.data<float>();
  // Each thread's share of the weight rows, widened a tile at a time into the thread's own buffer.
  ThreadPool::global().parallel_for(n, [&](int64_t begin, int64_t end) {
    if (!widen)
      return sgemm(m, end - begin, k, in, weight.data<float>() + begin * k, result + begin, n);
    const int64_t tile_rows = std::max<int64_t>(1, kTileElements / std::max<int64_t>(k, 1));
    float* tile = tile_of_this_thread(tile_rows * k);
    for (int64_t row = begin; row < end; row += tile_rows) {
      const int64_t rows = std::min(tile_rows, end - row);
      widen_rows(quantized, row, rows, tile);
      sgemm(m, rows, k, in, tile, result + row, n);
    }
  });
}

}  // namespace pagoda::cpu
