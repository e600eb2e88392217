// FlashInfer's FA2 paged prefill kernel planned and launched over pagoda's pages (see
// flashinfer_peer.h). The call sequence is that of FlashInfer's own host glue
// (csrc/batch_prefill.cu): PrefillPlan on the host writes the work split into the workspace, then
// BatchPrefillWithPagedKVCacheDispatched runs with pointers at the plan's offsets into it.
#include "bench/cccl_fast_mod_div.h"  // before FlashInfer's fastdiv.cuh, which needs it

#include <cuda_bf16.h>

#include <algorithm>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <limits>
#include <string_view>
#include <vector>

#include "bench/flashinfer_peer.h"
#include "core/cuda/context.h"

namespace pagoda::bench {
namespace {

using bf16 = __nv_bfloat16;
using Params = flashinfer::BatchPrefillPagedParams<bf16, bf16, bf16, int32_t>;
// The variant FlashInfer's Python builds by default: no custom mask, window, soft cap or ALiBi.
using Variant = flashinfer::DefaultAttention<false, false, false, false>;
using Launch = cudaError_t (*)(Params, bf16*, float*, bool, cudaStream_t);

enum class Mask { kNone, kCausal };

template <uint32_t kTileQ, uint32_t kHead, flashinfer::MaskMode kMask>
constexpr Launch kKernel = &flashinfer::BatchPrefillWithPagedKVCacheDispatched<
    kTileQ, kHead, kHead, flashinfer::PosEncodingMode::kNone,
    /*USE_FP16_QK_REDUCTION=*/false, kMask, Variant, Params>;

// The instantiation for the query tile (rows of query heads packed per CTA) that the plan chose.
// Only the tiles FlashInfer's plan picks for this benchmark's shapes on sm_90 are compiled (16 for
// decode's 4 packed rows, 128 for long prompts of head 128, 64 of head 256, 32 of head 512, where
// FlashInfer splits V's 512 columns to fit its registers): each instantiation
// is four kernels, and a build of every tile would take several times as long.
Launch choose_kernel(Mask mask, int64_t head_size, int64_t tile_q) {
  using flashinfer::MaskMode;
  if (mask == Mask::kNone && head_size == 128 && tile_q == 16) {
    return kKernel<16, 128, MaskMode::kNone>;
  }
  if (mask == Mask::kCausal && head_size == 128 && tile_q == 128) {
    return kKernel<128, 128, MaskMode::kCausal>;
  }
  if (mask == Mask::kCausal && head_size == 256 && tile_q == 64) {
    return kKernel<64, 256, MaskMode::kCausal>;
  }
  if (mask == Mask::kCausal && head_size == 512 && tile_q == 32) {
    return kKernel<32, 512, MaskMode::kCausal>;
  }
  fail("FlashInfer peer: no {} kernel built for head size {} with a query tile of {}",
       mask == Mask::kCausal ? "causal" : "unmasked", head_size, tile_q);
}

// Writes sequence s's block ids (row s of the table) at indices[indptr[s]], ...: FlashInfer's CSR
// page lists. One CTA per sequence.
__global__ void gather_pages(const int32_t* table, int64_t table_stride, const int32_t* indptr,
                             int32_t* indices) {
  const int s = blockIdx.x;
  const int pages = indptr[s + 1] - indptr[s];
  for (int i = threadIdx.x; i < pages; i += blockDim.x)
    indices[indptr[s] + i] = table[s * table_stride + i];
}

Tensor device_bytes(size_t bytes) {
  // FlashInfer's plan aligns its offsets to 16 bytes from the base; device allocations are
  // aligned further.
  return Tensor::empty({static_cast<int64_t>(std::max<size_t>(bytes, 16))}, DType::kU8,
                       Device::cuda(0));
}

void check_flashinfer(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) fail("FlashInfer {}: {}", what, cudaGetErrorString(status));
}

}  // namespace

class FlashInferPlan {
 public:
  // Sequence s has query_lens[s] rows, the last of its seq_lens[s] tokens.
  FlashInferPlan(const FlashInferBatch& batch, const std::vector<int64_t>& query_lens, Mask mask);
  void run() const {
    check_flashinfer(launch_(params_, tmp_v_, tmp_s_, /*enable_pdl=*/true, cuda::stream()),
                     "paged prefill kernel");
  }

 private:
  Tensor lists_;  // int32 on the device: [num_seqs + 1] query and page indptr, [num_seqs] last
                  // page lengths, then the [pages] block ids
  Tensor int_workspace_;    // the plan's work split (uint8)
  Tensor float_workspace_;  // split-KV partial outputs and log-sum-exps (uint8)
  Params params_;
  bf16* tmp_v_ = nullptr;
  float* tmp_s_ = nullptr;
  Launch launch_ = nullptr;
};

FlashInferPlan::FlashInferPlan(const FlashInferBatch& batch, const std::vector<int64_t>& query_lens,
                               Mask mask) {
  const int64_t seqs = static_cast<int64_t>(batch.seq_lens.size());
  const int64_t hq = batch.num_q_heads;
  const int64_t hkv = batch.num_kv_heads;
  const int64_t head = batch.head_size;
  const Tensor& query = batch.query;
  PAGODA_CHECK(!cuda::stream_is_capturing(), "FlashInfer plans before a graph is captured");
  PAGODA_CHECK(seqs > 0 && static_cast<int64_t>(query_lens.size()) == seqs && hkv > 0 &&
                   hq % hkv == 0 && batch.block_size > 0,
               "FlashInfer peer: {} sequences, {} / {} heads", seqs, hq, hkv);
  PAGODA_CHECK(query.dtype() == DType::kBF16 && query.dim() == 3 && query.size(1) == hq &&
                   query.size(2) == head && query.stride(2) == 1,
               "FlashInfer peer: query {}", query.shape());
  PAGODA_CHECK(batch.output.dtype() == DType::kBF16 && batch.output.is_contiguous() &&
                   batch.output.numel() == query.size(0) * hq * head,
               "FlashInfer peer: output {}", batch.output.shape());
  // FlashInfer keeps page strides and row counts in 32 bits.
  PAGODA_CHECK(batch.page_elements < std::numeric_limits<int32_t>::max() &&
                   query.size(0) < std::numeric_limits<int32_t>::max(),
               "FlashInfer peer: pages of {} elements, {} rows", batch.page_elements,
               query.size(0));

  // FlashInfer's CSR form of the block tables; the plan reads it on the host.
  const Tensor lists = Tensor::empty({3 * seqs + 2}, DType::kI32);
  int32_t* qo_indptr = lists.data<int32_t>();
  int32_t* kv_indptr = qo_indptr + seqs + 1;
  int32_t* last_page_len = kv_indptr + seqs + 1;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t len = batch.seq_lens[s];
    const int64_t pages = (len + batch.block_size - 1) / batch.block_size;
    PAGODA_CHECK(len > 0 && query_lens[s] <= len && pages <= batch.block_table_stride,
                 "FlashInfer peer: sequence {} of {} tokens, {} queries, {} blocks a row", s, len,
                 query_lens[s], batch.block_table_stride);
    qo_indptr[s + 1] = static_cast<int32_t>(qo_indptr[s] + query_lens[s]);
    kv_indptr[s + 1] = static_cast<int32_t>(kv_indptr[s] + pages);
    last_page_len[s] = static_cast<int32_t>(len - (pages - 1) * batch.block_size);
  }
  const int64_t rows = qo_indptr[seqs];
  const int64_t pages = kv_indptr[seqs];
  PAGODA_CHECK(rows == query.size(0), "FlashInfer peer: {} query rows for {} queries",
               query.size(0), rows);
  lists_ = Tensor::empty({3 * seqs + 2 + pages}, DType::kI32, Device::cuda(0));
  lists_.narrow(0, 0, 3 * seqs + 2).copy_from(lists);
  int32_t* device_lists = lists_.data<int32_t>();
  int32_t* indices = device_lists + 3 * seqs + 2;
  gather_pages<<<static_cast<unsigned>(seqs), 128, 0, cuda::stream()>>>(
      batch.block_table, batch.block_table_stride, device_lists + seqs + 1, indices);
  PAGODA_CUDA_CHECK_LAUNCH();

  // The plan as the Python wrappers make it: no window (-1), split-KV chosen by FlashInfer, no
  // colocated decode CTAs. enable_cuda_graph stays off: it pads the grid for a batch that changes
  // between replays, and this plan is fixed for the object's life (pagoda's plans here likewise
  // choose their splits from the batch). Called once to size the workspace, once to fill it.
  const auto plan = [&](auto planner, auto&&... workspace) {
    return planner(workspace..., qo_indptr, kv_indptr, static_cast<uint32_t>(rows),
                   static_cast<uint32_t>(seqs), static_cast<uint32_t>(hq),
                   static_cast<uint32_t>(hkv), static_cast<uint32_t>(head),
                   static_cast<uint32_t>(head), static_cast<uint32_t>(batch.block_size),
                   /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2u, /*window_left=*/-1,
                   /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
                   /*num_colocated_ctas=*/int64_t{0}, /*uniform_q_len=*/int64_t{0}, cuda::stream(),
                   /*kv_dtype_bytes=*/2u);
  };
  size_t float_bytes = 0;
  size_t int_bytes = 0;
  check_flashinfer(plan(flashinfer::PrefillPlanWorkspaceSize<int32_t>, float_bytes, int_bytes),
                   "workspace size");
  float_workspace_ = device_bytes(float_bytes);
  int_workspace_ = device_bytes(int_bytes);
  void* float_base = float_workspace_.raw_data();
  void* int_base = int_workspace_.raw_data();
  // The plan writes a host image of the int workspace and copies it up on the stream.
  std::vector<int64_t> staging(int_workspace_.numel() / 8 + 1);
  flashinfer::PrefillPlanInfo info;
  check_flashinfer(
      plan(flashinfer::PrefillPlan<int32_t>, float_base,
           static_cast<size_t>(float_workspace_.numel()), int_base,
           static_cast<void*>(staging.data()), static_cast<size_t>(int_workspace_.numel()), info),
      "plan");
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));  // staging may go
  launch_ = choose_kernel(mask, head, info.cta_tile_q);

  // K of block b at pool + b * page_elements, V block_size * num_kv_heads * head_size after it;
  // strides (page, token, head) in elements, shared by K and V.
  auto* k_data = static_cast<bf16*>(const_cast<void*>(batch.pool));
  bf16* v_data = k_data + batch.block_size * hkv * head;
  const int64_t strides[3] = {batch.page_elements, hkv * head, head};
  const flashinfer::paged_kv_t<bf16, int32_t> paged_kv(
      static_cast<uint32_t>(hkv), static_cast<uint32_t>(batch.block_size),
      static_cast<uint32_t>(head), static_cast<uint32_t>(seqs), flashinfer::QKVLayout::kNHD, k_data,
      v_data, strides, indices, device_lists + seqs + 1, device_lists + 2 * seqs + 2);
  params_ = Params(reinterpret_cast<bf16*>(query.raw_data()), paged_kv,
                   /*maybe_custom_mask=*/nullptr, /*q_indptr=*/device_lists,
                   /*maybe_mask_indptr=*/nullptr, /*maybe_q_rope_offset=*/nullptr,
                   reinterpret_cast<bf16*>(batch.output.raw_data()), /*lse=*/nullptr,
                   /*maybe_alibi_slopes=*/nullptr, static_cast<uint32_t>(hq),
                   static_cast<int32_t>(query.stride(0)), static_cast<int32_t>(query.stride(1)),
                   /*window_left=*/-1, /*logits_soft_cap=*/0.0f, batch.scale,
                   /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
  using flashinfer::GetPtrFromBaseOffset;
  params_.request_indices = GetPtrFromBaseOffset<int32_t>(int_base, info.request_indices_offset);
  params_.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_base, info.qo_tile_indices_offset);
  params_.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_base, info.kv_tile_indices_offset);
  params_.o_indptr = GetPtrFromBaseOffset<int32_t>(int_base, info.o_indptr_offset);
  params_.kv_chunk_size_ptr =
      GetPtrFromBaseOffset<int32_t>(int_base, info.kv_chunk_size_ptr_offset);
  if (info.split_kv) {
    params_.merge_indptr = GetPtrFromBaseOffset<int32_t>(int_base, info.merge_indptr_offset);
    tmp_v_ = GetPtrFromBaseOffset<bf16>(float_base, info.v_offset);
    tmp_s_ = GetPtrFromBaseOffset<float>(float_base, info.s_offset);
  }
  params_.padded_batch_size = static_cast<uint32_t>(info.padded_batch_size);
  params_.max_total_num_rows = static_cast<uint32_t>(info.total_num_rows);
}

FlashInferAttention::FlashInferAttention(std::unique_ptr<FlashInferPlan> plan)
    : plan_(std::move(plan)) {}

FlashInferAttention::~FlashInferAttention() = default;

std::unique_ptr<FlashInferAttention> FlashInferAttention::decode(const FlashInferBatch& batch) {
  if (batch.head_size != 128) {
    fail("FlashInfer decode is built for head size 128, not {}", batch.head_size);
  }
  return std::unique_ptr<FlashInferAttention>(
      new FlashInferAttention(std::make_unique<FlashInferPlan>(
          batch, std::vector<int64_t>(batch.seq_lens.size(), 1), Mask::kNone)));
}

std::unique_ptr<FlashInferAttention> FlashInferAttention::prefill(const FlashInferBatch& batch,
                                                                  int64_t query_len) {
  if (batch.head_size != 128 && batch.head_size != 256 && batch.head_size != 512) {
    fail("FlashInfer prefill is built for head sizes 128, 256 and 512, not {}", batch.head_size);
  }
  std::vector<int64_t> query_lens = batch.seq_lens;
  for (int64_t& len : query_lens)
    len = std::min(len, query_len);
  return std::unique_ptr<FlashInferAttention>(
      new FlashInferAttention(std::make_unique<FlashInferPlan>(batch, query_lens, Mask::kCausal)));
}

void FlashInferAttention::run() {
  plan_->run();
}

}  // namespace pagoda::bench
