// linear() through cuBLASLt. The row-major product out[M, N] = x[M, K] · weight[N, K]ᵀ is, read
// column-major, outᵀ[N, M] = op(A)·B with A = weightᵀ as a K×N matrix (lda = weight row stride,
// op T) and B = xᵀ as a K×M matrix (ldb = x row stride, op N). Descriptors, layouts and the
// heuristic's algorithm are planned once per shape and reused: a heuristic query costs tens of
// microseconds and linear runs hundreds of times a step. FP8 operands take the same route, with
// cuBLASLt's block scales: 128 x 128 blocks for A (BLK128x128_32F, a block row's scales at a
// pitch of a multiple of 4) and one scale per column of B and group of 128 rows (VEC128_32F,
// [K / 128, M]).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "core/cuda/context.h"
#include "ops/cuda/elementwise_common.cuh"
#include "ops/cuda/ops.h"

namespace pagoda::cuda {
namespace {

// Plans made before the cache is dropped and rebuilt; bounds host memory when M takes many values
// (chunked prefill), while a steady decode loop only ever hits.
constexpr size_t kMaxPlans = 4096;
// cuBLASLt's own default; larger alignments add nothing to the heuristic.
constexpr int kMaxAlignment = 256;

// m, n, k, lda, ldb, ldc, output type, alignments of A, B and C/D, device, and 1 for FP8 operands.
using PlanKey = std::array<int64_t, 12>;

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = 0;
    for (int64_t v : key)
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h;
  }
};

// Owns the cuBLASLt objects of one GEMM shape. D shares C's layout (beta is 0; D is written).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // weightᵀ: K×N, ld lda
  cublasLtMatrixLayout_t b = nullptr;  // xᵀ: K×M, ld ldb
  cublasLtMatrixLayout_t c = nullptr;  // outᵀ: N×M, ld ldc
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) blaslt().matrix_layout_destroy(c);
    if (b != nullptr) blaslt().matrix_layout_destroy(b);
    if (a != nullptr) blaslt().matrix_layout_destroy(a);
    if (desc != nullptr) blaslt().matmul_desc_destroy(desc);
  }
};

struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t p) const { blaslt().matmul_preference_destroy(p); }
};
using Preference =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDeleter>;

// The largest power of two (up to kMaxAlignment) that divides the address.
int64_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = kMaxAlignment;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  PAGODA_CUBLAS_CHECK(blaslt().matmul_desc_set_attribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  PAGODA_CUBLAS_CHECK(
      blaslt().matmul_preference_set_attribute(preference, attribute, &value, sizeof(value)));
}

// The operands of the call being planned: candidate algorithms are timed on them.
struct Operands {
  const void* weight;
  const void* x;
  void* out;
  const float* weight_scales = nullptr;  // FP8 operands' scales
  const float* x_scales = nullptr;
};

// Rows up to which candidate algorithms are timed rather than trusted to the heuristic: the
// decode GEMMs, whose latency is the step's, and whose shapes are few.
constexpr int64_t kTunedRows = 256;
constexpr int kCandidates = 8;

// Reads `count` 16-byte pieces, so that they displace what L2 held; the store keeps the loads.
__global__ void read_through(const uint4* data, size_t count, uint32_t* never) {
  uint32_t folded = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = data[i];
    folded += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (folded == 0x9e3779b9u) *never = folded;  // the buffer holds zeros
}

// Timed runs read their weight from memory, as a decode step does: between two steps' reads of
// one weight the whole model passes through L2. Back to back, a weight that fits in L2
// (Llama-3-8B's o_proj and qkv, 32 and 48 MB) would be read from it, favouring kernels that are
// fast on L2 hits over those that stream well. So before each timed run of such a weight a buffer
// of twice L2's size is read (read, not written: dirty lines would be written back during the timed
// run). The buffer lives only while timing; without memory for it, runs go as they are.
class ColdL2 {
 public:
  explicit ColdL2(int64_t weight_bytes) {
    int device = 0;
    int l2_bytes = 0;
    PAGODA_CUDA_CHECK(cudaGetDevice(&device));
    PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    if (weight_bytes >= 2 * int64_t{l2_bytes}) return;  // streams from memory anyway
    bytes_ = 2 * static_cast<size_t>(l2_bytes);
    if (cudaMalloc(&buffer_, bytes_) != cudaSuccess) {
      (void)cudaGetLastError();
      buffer_ = nullptr;
      return;
    }
    PAGODA_CUDA_CHECK(cudaMemsetAsync(buffer_, 0, bytes_, stream()));
  }
  ~ColdL2() {
    if (buffer_ != nullptr) cudaFree(buffer_);
  }
  ColdL2(const ColdL2&) = delete;
  ColdL2& operator=(const ColdL2&) = delete;

  void flush() const {
    if (buffer_ == nullptr) return;
    read_through<<<1024, 256, 0, stream()>>>(static_cast<const uint4*>(buffer_), bytes_ / 16,
                                             static_cast<uint32_t*>(buffer_));
    PAGODA_CUDA_CHECK_LAUNCH();
  }

 private:
  void* buffer_ = nullptr;
  size_t bytes_ = 0;
};

// Median milliseconds of three runs of `body` on the engine stream, after one untimed, each run
// after flushing `l2`.
template <typename Body>
float median_ms(Body&& body, const ColdL2& l2) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  PAGODA_CUDA_CHECK(cudaEventCreate(&start));
  PAGODA_CUDA_CHECK(cudaEventCreate(&stop));
  body();
  std::array<float, 3> times{};
  for (float& ms : times) {
    l2.flush();
    PAGODA_CUDA_CHECK(cudaEventRecord(start, stream()));
    body();
    PAGODA_CUDA_CHECK(cudaEventRecord(stop, stream()));
    PAGODA_CUDA_CHECK(cudaEventSynchronize(stop));
    PAGODA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[1];
}

// The fastest of `count` candidates on the real operands (median of three timed runs each).
cublasLtMatmulAlgo_t fastest(const Plan& plan, const cublasLtMatmulHeuristicResult_t* candidates,
                             int count, const Operands& operands, int64_t weight_bytes) {
  const ColdL2 l2(weight_bytes);
  const float alpha = 1.0f;
  const float beta = 0.0f;
  float best_ms = INFINITY;
  int best = 0;
  for (int i = 0; i < count; ++i) {
    auto run = [&] {
      return blaslt().matmul(blaslt_handle(), plan.desc, &alpha, operands.weight, plan.a,
                             operands.x, plan.b, &beta, operands.out, plan.c, operands.out, plan.c,
                             &candidates[i].algo, blaslt_workspace(), kBlasltWorkspaceBytes,
                             stream());
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate may refuse these operands
    const float ms = median_ms([&] { PAGODA_CUBLAS_CHECK(run()); }, l2);
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  return candidates[best].algo;
}

std::unique_ptr<Plan> make_plan(const PlanKey& key, const Operands& operands) {
  const auto [m, n, k, lda, ldb, ldc, out_type, align_a, align_b, align_c, device, fp8] = key;
  auto plan = std::make_unique<Plan>();
  PAGODA_CUBLAS_CHECK(blaslt().matmul_desc_create(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cudaDataType_t in_type = fp8 != 0 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (fp8 != 0) {
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                  int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F});
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                  int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F});
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, operands.weight_scales);
    set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, operands.x_scales);
  }
  const auto c_type = static_cast<cudaDataType_t>(out_type);
  PAGODA_CUBLAS_CHECK(blaslt().matrix_layout_create(&plan->a, in_type, k, n, lda));
  PAGODA_CUBLAS_CHECK(blaslt().matrix_layout_create(&plan->b, in_type, k, m, ldb));
  PAGODA_CUBLAS_CHECK(blaslt().matrix_layout_create(&plan->c, c_type, n, m, ldc));

  cublasLtMatmulPreference_t raw_preference = nullptr;
  PAGODA_CUBLAS_CHECK(blaslt().matmul_preference_create(&raw_preference));
  const Preference preference(raw_preference);
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 uint64_t{kBlasltWorkspaceBytes});
  // Views (a narrowed x, a weight inside a fused tensor) need not start 256-byte aligned: ask only
  // for algorithms that work at the alignment these pointers actually have.
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                 static_cast<uint32_t>(align_a));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 static_cast<uint32_t>(align_b));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                 static_cast<uint32_t>(align_c));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                 static_cast<uint32_t>(align_c));

  // Small M: time the heuristic's first candidates (outside graph capture); else take its first.
  const bool tune = m <= kTunedRows && !stream_is_capturing();
  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> results{};
  int returned = 0;
  PAGODA_CUBLAS_CHECK(blaslt().matmul_algo_get_heuristic(
      blaslt_handle(), plan->desc, plan->a, plan->b, plan->c, plan->c, raw_preference,
      tune ? kCandidates : 1, results.data(), &returned));
  if (returned == 0) {
    fail("cuBLASLt has no {}algorithm for linear M={} N={} K={} (lda {}, ldb {}, ldc {})",
         fp8 != 0 ? "FP8 " : "", m, n, k, lda, ldb, ldc);
  }
  plan->algo = returned > 1
                   ? fastest(*plan, results.data(), returned, operands, n * k * (fp8 != 0 ? 1 : 2))
                   : results[0].algo;
  return plan;
}

// Plans and choices are kept per device, each behind its own lock: planning and timing wait for
// the device's stream, and a rank of another GPU waiting for the lock could be the one whose
// collective that stream is waiting for. These are the locks of one device's plans, and of its GEMV
// choices (whose timing runs plans).
std::mutex& device_mutex(int device, bool choices = false) {
  static std::array<std::array<std::mutex, 2>, kMaxDevices> mutexes;
  PAGODA_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index {}", device);
  return mutexes[device][choices ? 1 : 0];
}

// The cached plan for `key`, planned on first use. Plans live until the process ends (or the cache
// is dropped when full); callers hold the device's lock while using one.
const Plan& find_plan(const PlanKey& key, const Operands& operands) {
  static std::array<std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>, kMaxDevices>
      device_plans;
  auto& plans = device_plans[key[10]];  // the device
  auto found = plans.find(key);
  if (found != plans.end()) return *found->second;
  std::unique_ptr<Plan> plan = make_plan(key, operands);
  if (plans.size() >= kMaxPlans) plans.clear();
  return *plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

namespace {

// out = x · weightᵀ through the planned GEMM of its shape, on operands the caller checked: x
// [M, K] and out [M, N] on one device, the weight's N rows `weight_stride` elements apart. FP8
// operands come with their scales.
void planned_gemm(const Tensor& x, const void* weight, int64_t n, int64_t weight_stride,
                  const Tensor& out, const float* weight_scales = nullptr,
                  const float* x_scales = nullptr) {
  const int64_t m = x.size(0);
  const int64_t k = x.size(1);
  PAGODA_CHECK(!x.device().is_cpu() && out.device() == x.device(),
               "linear tensors on devices {}, {}", x.device().to_string(),
               out.device().to_string());
  if (m == 0 || n == 0) return;
  PAGODA_CHECK(k > 0, "linear with K = 0 (x {}, N {})", x.shape(), n);

  const int device = x.device().index;
  int current = 0;
  PAGODA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) PAGODA_CUDA_CHECK(cudaSetDevice(device));

  // A single row or column has no meaningful leading dimension; K (or N) keeps cuBLASLt's
  // ld >= rows rule and lets every such view share one plan.
  const int64_t lda = n == 1 ? k : weight_stride;
  const int64_t ldb = m == 1 ? k : x.stride(0);
  const int64_t ldc = n;
  PAGODA_CHECK(lda >= k && ldb >= k, "linear row strides x {}, weight {} for K = {}", x.stride(0),
               weight_stride, k);
  const cudaDataType_t out_type = out.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
  const bool fp8 = weight_scales != nullptr;
  const PlanKey key{m,
                    n,
                    k,
                    lda,
                    ldb,
                    ldc,
                    static_cast<int64_t>(out_type),
                    alignment_of(weight),
                    alignment_of(x.raw_data()),
                    alignment_of(out.raw_data()),
                    device,
                    fp8 ? 1 : 0};

  const std::lock_guard lock(device_mutex(device));
  const Plan& plan =
      find_plan(key, {weight, x.raw_data(), out.raw_data(), weight_scales, x_scales});
  if (fp8) {  // plans are shared by every weight of the shape
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, weight_scales);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scales);
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  PAGODA_CUBLAS_CHECK(blaslt().matmul(blaslt_handle(), plan.desc, &alpha, weight, plan.a,
                                      x.raw_data(), plan.b, &beta, out.raw_data(), plan.c,
                                      out.raw_data(), plan.c, &plan.algo, blaslt_workspace(),
                                      kBlasltWorkspaceBytes, stream()));
}

void check_output(const Tensor& out) {
  if (out.dtype() != DType::kBF16 && out.dtype() != DType::kF32) {
    fail("CUDA linear writes bfloat16 or float32; got out {}", dtype_name(out.dtype()));
  }
}

}  // namespace

void cublaslt_linear(const Tensor& x, const Tensor& weight, const Tensor& out) {
  PAGODA_CHECK(x.dim() == 2 && weight.dim() == 2 && out.dim() == 2,
               "linear needs 2-D tensors; got x {}, weight {}, out {}", x.shape(), weight.shape(),
               out.shape());
  const int64_t m = x.size(0);
  const int64_t k = x.size(1);
  const int64_t n = weight.size(0);
  PAGODA_CHECK(weight.size(1) == k && out.size(0) == m && out.size(1) == n,
               "linear shapes: x {} · weight {}ᵀ -> out {}", x.shape(), weight.shape(),
               out.shape());
  PAGODA_CHECK(
      (x.stride(1) == 1 || k <= 1) && (weight.stride(1) == 1 || k <= 1) && out.is_contiguous(),
      "linear needs unit inner strides and a contiguous out; strides x {}, weight {}, "
      "out {}",
      x.strides(), weight.strides(), out.strides());
  if (x.dtype() != DType::kBF16 || weight.dtype() != DType::kBF16) {
    fail("CUDA linear takes bfloat16 x and weight; got x {} and weight {}", dtype_name(x.dtype()),
         dtype_name(weight.dtype()));
  }
  check_output(out);
  PAGODA_CHECK(weight.device() == x.device(), "linear tensors on devices {}, {}",
               x.device().to_string(), weight.device().to_string());
  planned_gemm(x, weight.raw_data(), n, weight.stride(0), out);
}

void cublaslt_fp8_linear(const Tensor& xq, const Tensor& x_scales, const Weight& weight,
                         const Tensor& out) {
  const int64_t m = xq.size(0);
  const int64_t k = weight.cols();
  const int64_t n = weight.rows();
  PAGODA_CHECK(weight.quantized() && weight.block_rows == 128 && weight.block_cols == 128 &&
                   k % 128 == 0 && weight.scales.size(1) % 4 == 0 &&
                   weight.values.stride(0) % 16 == 0 && weight.values.stride(1) == 1,
               "cuBLASLt FP8 needs a weight in 128 x 128 blocks, K a multiple of 128; got {} in "
               "blocks of {} x {}",
               weight.values.shape(), weight.block_rows, weight.block_cols);
  PAGODA_CHECK(xq.dtype() == DType::kF8E4M3 && xq.dim() == 2 && xq.size(1) == k &&
                   xq.is_contiguous() && x_scales.dtype() == DType::kF32 &&
                   x_scales.is_contiguous() && x_scales.dim() == 2 && x_scales.size(0) == k / 128 &&
                   x_scales.size(1) == m && out.dim() == 2 && out.size(0) == m &&
                   out.size(1) == n && out.is_contiguous(),
               "cuBLASLt FP8 operands: x {} ({}) with scales {}, weight {} -> out {}", xq.shape(),
               dtype_name(xq.dtype()), x_scales.shape(), weight.values.shape(), out.shape());
  check_output(out);
  PAGODA_CHECK(weight.device() == xq.device() && x_scales.device() == xq.device(),
               "linear tensors on devices {}, {}", xq.device().to_string(),
               weight.device().to_string());
  planned_gemm(xq, weight.values.raw_data(), n, weight.values.stride(0), out,
               weight.scales.data<float>(), x_scales.data<float>());
}

namespace {

// Our matrix-vector kernels start under dependent launch: their first weight loads overlap the
// kernel before them in a step, a head start that timing a kernel alone does not see, and that
// cuBLASLt's kernels, which wait for the one before to finish, do not get. So cuBLASLt takes a
// product from them only when it is faster alone by more than this share.
constexpr float kDependentLaunchAllowance = 0.1f;

// Whether `first` is the faster way to compute the product keyed by `key` (of a weight of
// `weight_bytes`), timed once per key on the first call (outside graph capture; a key first seen
// while capturing takes `second`); `first` wins ties within `allowance` of `second`'s time.
template <typename First, typename Second>
bool first_is_faster(const PlanKey& key, int device, int64_t weight_bytes, float allowance,
                     First&& first, Second&& second) {
  static std::array<std::unordered_map<PlanKey, bool, PlanKeyHash>, kMaxDevices> device_choices;
  const std::lock_guard lock(device_mutex(device, true));
  auto& choices = device_choices[device];
  const auto found = choices.find(key);
  if (found != choices.end()) return found->second;
  if (stream_is_capturing()) return false;
  const ColdL2 l2(weight_bytes);
  const float second_ms = median_ms(second, l2);
  const float first_ms = median_ms(first, l2);
  return choices[key] = first_ms * (1.0f - allowance) < second_ms;
}

// For measuring one matrix-vector form against the other inside whole steps: PAGODA_GEMV=cuda or
// tensor takes that form wherever both apply; unset or auto, the faster alone is timed per shape.
enum class GemvForm { kTimed, kCudaCores, kTensorCores };

GemvForm gemv_form() {
  static const GemvForm form = [] {
    const char* value = std::getenv("PAGODA_GEMV");
    const std::string_view name = value == nullptr ? "auto" : value;
    if (name == "auto") return GemvForm::kTimed;
    if (name == "cuda") return GemvForm::kCudaCores;
    PAGODA_CHECK(name == "tensor", "PAGODA_GEMV is auto, cuda or tensor, not '{}'", name);
    return GemvForm::kTensorCores;
  }();
  return form;
}

// Whether the tensor-core matrix-vector kernel should run rather than the CUDA-core one: where
// both apply, the CUDA-core one at one row of x, else the faster for this shape, timed once per
// shape apart from the choice against the GEMM. At one row the CUDA-core kernels lead alone on
// most shapes and by little on the rest, where a timed choice can go either way from one process
// to the next. Whole batch-1 steps of the Llama-3-8B shape on an H100, in one machine start:
// forcing the CUDA-core kernels took 0.99x the timed choices' step with FP8 projections and
// 0.986x with bf16 ones; in another start the rule and the timed choices gave the same steps
// (and the Gemma-4-E4B shape's).
template <typename CudaCores, typename TensorCores>
bool prefer_tensor_cores(PlanKey key, int device, int64_t weight_bytes, bool cuda_cores_apply,
                         bool tensor_cores_apply, CudaCores&& cuda_cores,
                         TensorCores&& tensor_cores) {
  if (!tensor_cores_apply) return false;
  if (!cuda_cores_apply) return true;
  if (gemv_form() != GemvForm::kTimed) return gemv_form() == GemvForm::kTensorCores;
  if (key[0] == 1) return false;  // key[0]: rows of x
  key[8] = 1;
  return !first_is_faster(key, device, weight_bytes, 0.0f, cuda_cores, tensor_cores);
}

}  // namespace

// For a few rows, the fastest of the matrix-vector kernels and the tensor-core GEMM.
void linear(const Tensor& x, const Weight& quantized, const Tensor& out) {
  // The matrix-vector kernels would read a host tensor's address as device memory.
  PAGODA_CHECK(!x.device().is_cpu() && quantized.device() == x.device() &&
                   out.device() == x.device() &&
                   (!quantized.quantized() || quantized.scales.device() == x.device()),
               "linear tensors on devices: x {}, weight {}, out {}", x.device().to_string(),
               quantized.device().to_string(), out.device().to_string());
  const int device = x.device().index;
  const PlanKey key{x.size(0),
                    quantized.rows(),
                    quantized.cols(),
                    quantized.values.stride(0),
                    x.stride(0),
                    static_cast<int64_t>(out.dtype()),
                    device,
                    quantized.quantized() ? 1 : 0,
                    0,
                    0,
                    0,
                    0};
  const int64_t weight_bytes =
      quantized.rows() * quantized.cols() * quantized.values.element_size();
  if (quantized.quantized()) {
    check_fp8_linear(x, quantized, out);
    const bool small = fp8_gemv_applies(x);
    const auto cuda_cores = [&] { fp8_gemv(x, quantized, out); };
    const auto tensor_cores = [&] { fp8_mma_gemv(x, quantized, out); };
    const bool mma =
        small && prefer_tensor_cores(key, device, weight_bytes, true,
                                     fp8_mma_gemv_applies(x, quantized), cuda_cores, tensor_cores);
    const auto gemv = [&] { return mma ? tensor_cores() : cuda_cores(); };
    if (!fp8_gemm_applies(x, quantized)) {
      return small ? gemv() : fp8_dequantized_linear(x, quantized, out);
    }
    const auto gemm = [&] { fp8_gemm(x, quantized, out); };
    return small &&
                   first_is_faster(key, device, weight_bytes, kDependentLaunchAllowance, gemv, gemm)
               ? gemv()
               : gemm();
  }
  const Tensor& weight = quantized.values;
  const bool cuda_cores_apply = gemv_applies(x, weight, out);
  const bool tensor_cores_apply = mma_gemv_applies(x, weight, out);
  if (!cuda_cores_apply && !tensor_cores_apply) return cublaslt_linear(x, weight, out);
  const auto cuda_cores = [&] { gemv(x, weight, out); };
  const auto tensor_cores = [&] { mma_gemv(x, weight, out); };
  const bool mma = prefer_tensor_cores(key, device, weight_bytes, cuda_cores_apply,
                                       tensor_cores_apply, cuda_cores, tensor_cores);
  const auto small = [&] { return mma ? tensor_cores() : cuda_cores(); };
  const auto blas = [&] { cublaslt_linear(x, weight, out); };
  return first_is_faster(key, device, weight_bytes, kDependentLaunchAllowance, small, blas)
             ? small()
             : blas();
}

void gated_linear(const Tensor& x, const Weight& weight, Activation activation, const Tensor& up,
                  const Tensor& out) {
  if (x.size(0) == 1 && !weight.quantized() && gemv_applies(x, weight.values, out)) {
    return gated_gemv(x, weight.values, activation, up, out);
  }
  linear(x, weight, out);
  gated_activation(activation, out, up, out);
}

bool fused_launches() {
  static const bool on = env_switch("PAGODA_FUSED");
  return on;
}

namespace {

// A contiguous, 16-byte aligned bf16 row [1, n] on `device`.
bool bf16_row(const Tensor& t, int64_t n, Device device) {
  return t.defined() && t.device() == device && t.dtype() == DType::kBF16 && t.dim() == 2 &&
         t.size(0) == 1 && t.size(1) == n && t.is_contiguous() && elementwise::aligned16(t);
}

// Whether the FP8 GEMV reads this weight for this x (check_fp8_linear's conditions, as a test).
bool fp8_gemv_reads(const Tensor& x, const Weight& weight) {
  return fp8_weight_readable(weight) && x.dim() == 2 && x.size(1) == weight.cols() &&
         weight.scales.device() == x.device() && fp8_gemv_applies(x);
}

}  // namespace

bool paired_gated_applies(const Tensor& x, const Weight& gate_up, const Tensor& out) {
  if (!fused_launches() || !gate_up.defined() || x.dim() != 2 || x.size(0) != 1 ||
      x.dtype() != DType::kBF16 || gate_up.device() != x.device() || gate_up.rows() % 2 != 0 ||
      !bf16_row(out, gate_up.rows() / 2, x.device())) {
    return false;
  }
  return gate_up.quantized() ? fp8_gemv_reads(x, gate_up)
                             : paired_gemv_applies(x, gate_up.values, out);
}

void paired_gated_linear(const Tensor& x, const Weight& gate_up, Activation activation,
                         const Tensor& out) {
  PAGODA_CHECK(paired_gated_applies(x, gate_up, out),
               "a paired gated product of x {} and weight {} into {}", x.shape(),
               gate_up.values.shape(), out.shape());
  elementwise::device_stream(x, out);
  if (gate_up.quantized()) return fp8_paired_gemv(x, gate_up, activation, out);
  paired_gemv(x, gate_up.values, activation, out);
}

}  // namespace pagoda::cuda
