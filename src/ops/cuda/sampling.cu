// Sampling on the device, so a step copies two numbers per row to the host instead of the whole
// vocabulary: greedy rows take the argmax, the other rows draw the token sample_token() draws on
// the host, without sorting (sampling_row.cuh says how). At small batch a cluster of CTAs shares
// each row. The rows' parameters travel in the launch itself up to kInlineRows rows, so a step's
// sampling is queued behind its graph without the host waiting for it; more rows' are copied from
// pinned memory on the same stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <mutex>

#include "core/cuda/context.h"
#include "core/cuda/launch.h"
#include "ops/cuda/ops.h"
#include "ops/cuda/sampling_row.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kInlineRows = 32;  // 2 KB of launch parameters

struct InlineRows {
  SamplingRow rows[kInlineRows];
};

// The rows' parameters are `uploaded` when not null, else `inline_rows` when `inline_count` > 0
// (else every row is greedy).
__global__ void __launch_bounds__(sampling::kThreads)
    sample_kernel(const float* logits, int vocab, const SamplingRow* uploaded,
                  const __grid_constant__ InlineRows inline_rows, int inline_count,
                  const float* draft_logits, int32_t* out_ids, float* out_logprobs,
                  int32_t* out_kept) {
  start_after_prior_kernels();
  __shared__ sampling::Shared sh;
  const SamplingRow* rows = uploaded != nullptr ? uploaded
                            : inline_count > 0  ? inline_rows.rows
                                                : nullptr;
  sampling::sample_row(blockIdx.x / sampling::cluster_size(), logits, vocab, rows, draft_logits,
                       out_ids, out_logprobs, out_kept, sh);
}

// The largest cluster of sample_kernel the current device runs, a power of two.
int largest_cluster() {
  static std::array<int, kMaxDevices> cached{};  // 0 until asked
  static std::mutex mutex;
  const int device = current_device_slot();
  const std::lock_guard lock(mutex);
  if (cached[device] != 0) return cached[device];
  cached[device] = 1;
  for (int size = sampling::kMaxCluster; size > 1; size /= 2) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(size);
    config.blockDim = dim3(sampling::kThreads);
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = size;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, sample_kernel, &config) == cudaSuccess &&
        clusters > 0) {
      cached[device] = size;
      break;
    }
    (void)cudaGetLastError();
  }
  return cached[device];
}

// Parameters of more rows than the launch carries: staged in pinned memory and copied on the
// stream, so the host does not wait for the step's graph either. One area per device, held from
// staging to the kernel's launch: the staging area is rewritten once the copy before has left it,
// and the device area once the kernel before has read it (the stream orders that).
class RowUpload {
 public:
  ~RowUpload() {
    cudaFreeHost(host_);
    cudaFree(device_);
    if (copied_ != nullptr) cudaEventDestroy(copied_);
  }

  std::mutex& mutex() { return mutex_; }

  // The rows on the device, in stream order. Call with mutex() held until the kernel is queued.
  const SamplingRow* upload(std::span<const SamplingRow> rows) {
    PAGODA_CHECK(!stream_is_capturing(),
                 "sampling {} rows uploads their parameters, which a graph capture cannot hold",
                 rows.size());
    const auto count = static_cast<int64_t>(rows.size());
    if (copied_ == nullptr)
      PAGODA_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    PAGODA_CUDA_CHECK(cudaEventSynchronize(copied_));
    if (count > capacity_) {
      PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the last kernel has read device_
      PAGODA_CUDA_CHECK(cudaFreeHost(host_));
      PAGODA_CUDA_CHECK(cudaFree(device_));
      host_ = device_ = nullptr;
      capacity_ = 0;
      const int64_t capacity = std::max<int64_t>(count, 256);
      const auto bytes = static_cast<size_t>(capacity) * sizeof(SamplingRow);
      PAGODA_CUDA_CHECK(cudaMallocHost(&host_, bytes));
      PAGODA_CUDA_CHECK(cudaMalloc(&device_, bytes));
      capacity_ = capacity;
    }
    std::copy(rows.begin(), rows.end(), host_);
    PAGODA_CUDA_CHECK(
        cudaMemcpyAsync(device_, host_, rows.size_bytes(), cudaMemcpyHostToDevice, stream()));
    PAGODA_CUDA_CHECK(cudaEventRecord(copied_, stream()));
    return device_;
  }

 private:
  std::mutex mutex_;
  SamplingRow* host_ = nullptr;
  SamplingRow* device_ = nullptr;
  int64_t capacity_ = 0;
  cudaEvent_t copied_ = nullptr;
};

RowUpload& row_upload() {
  static std::array<RowUpload, kMaxDevices> uploads;
  return uploads[current_device_slot()];
}

// CTAs a row takes: at small batch a row's passes spread over a cluster, as long as the clusters
// of the step still fit on the device about twice over; never more than it can run at once.
int cluster_size_for(int64_t rows) {
  const int largest = largest_cluster();
  int size = 1;
  while (size < largest && rows * size * 2 <= multiprocessor_count())
    size *= 2;
  return size;
}

}  // namespace

void sample(const Tensor& logits, std::span<const SamplingRow> rows, const Tensor& ids,
            const Tensor& logprobs, const Tensor& kept, const Tensor& draft_logits) {
  PAGODA_CHECK(logits.dim() == 2 && logits.dtype() == DType::kF32 && logits.is_contiguous() &&
                   !logits.device().is_cpu(),
               "sampling needs contiguous [rows, vocab] f32 logits on a GPU; got {}",
               logits.shape());
  const int64_t count = logits.size(0);
  const int64_t vocab = logits.size(1);
  PAGODA_CHECK(static_cast<int64_t>(rows.size()) == count && ids.dtype() == DType::kI32 &&
                   ids.numel() == count && ids.is_contiguous() && logprobs.dtype() == DType::kF32 &&
                   logprobs.numel() == count && logprobs.is_contiguous(),
               "sampling {} rows: parameters and outputs must have a row each", count);
  const Device device = logits.device();
  bool any_random = false, any_draft = false;
  int64_t drafts = 0;  // rows of draft_logits that sampling rows judge against
  for (const SamplingRow& row : rows) {
    any_random = any_random || row.temperature > 0.0;
    if (row.draft < 0) continue;
    any_draft = true;
    PAGODA_CHECK(row.draft < vocab, "a draft {} outside the vocabulary of {}", row.draft, vocab);
    if (row.temperature > 0.0) {
      PAGODA_CHECK(draft_logits.defined() && draft_logits.dim() == 2 &&
                       draft_logits.size(1) == vocab && draft_logits.dtype() == DType::kF32 &&
                       draft_logits.is_contiguous() && draft_logits.device() == device &&
                       row.draft_row >= 0 && row.draft_row < draft_logits.size(0),
                   "a sampling row judging a draft needs its drafter's row {} of contiguous "
                   "[drafts, {}] f32 logits on the device",
                   row.draft_row, vocab);
      drafts = draft_logits.size(0);
    }
  }
  PAGODA_CHECK(!any_draft || (kept.defined() && kept.dtype() == DType::kI32 &&
                              kept.numel() == count && kept.is_contiguous()),
               "sampling {} rows that judge drafts needs a kept flag per row", count);
  PAGODA_CHECK(vocab > 0 && vocab < INT_MAX && count + drafts < (int64_t{1} << 31) &&
                   (count + drafts) * vocab < (int64_t{1} << 31),
               "sampling {} rows of {} logits", count + drafts, vocab);
  if (count == 0) return;
  // All-greedy steps without drafts need no parameters on the device; a few rows' travel in the
  // launch, more rows' are copied ahead of it.
  const bool with_params = any_random || any_draft;
  InlineRows inline_rows;
  int inline_count = 0;
  const SamplingRow* uploaded = nullptr;
  std::unique_lock<std::mutex> upload_lock;
  if (with_params && count <= kInlineRows) {
    std::copy(rows.begin(), rows.end(), inline_rows.rows);
    inline_count = static_cast<int>(count);
  } else if (with_params) {
    RowUpload& upload = row_upload();
    upload_lock = std::unique_lock(upload.mutex());
    uploaded = upload.upload(rows);
  }
  const int cluster = cluster_size_for(count);
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(count * cluster));
  config.blockDim = dim3(sampling::kThreads);
  config.stream = stream();
  config.attrs = attributes;
  config.numAttrs = 2;
  PAGODA_CUDA_CHECK(cudaLaunchKernelEx(
      &config, sample_kernel, logits.data<float>(), static_cast<int>(vocab), uploaded, inline_rows,
      inline_count, drafts > 0 ? draft_logits.data<float>() : nullptr, ids.data<int32_t>(),
      logprobs.data<float>(), any_draft ? kept.data<int32_t>() : nullptr));
}

}  // namespace pagoda::cuda
