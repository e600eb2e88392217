#include "attention/backend.h"

#include <fmt/ranges.h>

#include "attention/cpu/cpu_backend.h"
#if PAGODA_HAVE_CUDA
#include "attention/cuda/cuda_backend.h"
#endif

namespace pagoda {

std::unique_ptr<AttentionPlan> PagedAttentionBackend::make_plan(const AttentionGroup& group) const {
  if (make_ == nullptr)
    fail("attention backend '{}' declares a layout only; it runs nothing", name_);
  if (group.device.type != device_) {
    fail("attention backend '{}' does not run on {}", name_, group.device.to_string());
  }
  return make_(group);
}

const AttentionBackend& find_attention_backend(const std::string& name) {
  if (name == "cpu") return cpu_attention_backend();
#if PAGODA_HAVE_CUDA
  if (name == "cuda") return cuda_attention_backend();
#endif
  fail("unknown attention backend '{}'; this build has: {}", name,
       fmt::join(attention_backend_names(), ", "));
}

std::vector<std::string> attention_backend_names() {
#if PAGODA_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

const AttentionBackend& default_attention_backend(DeviceType device) {
  return find_attention_backend(device == DeviceType::kCpu ? "cpu" : "cuda");
}

KvCacheView reshape_kv_cache(const Tensor& buffer, const AttentionBackend& backend,
                             const KvPageShape& page, int64_t num_blocks,
                             const PagePlacement& placement) {
  PAGODA_CHECK(buffer.dtype() == DType::kU8 && buffer.dim() == 1 && buffer.is_contiguous(),
               "the KV buffer must be a contiguous 1-D uint8 tensor");
  const int64_t element = dtype_size(page.dtype);
  const int64_t page_bytes = page.page_bytes();
  const int64_t stride_bytes = placement.block_stride_bytes;
  if (num_blocks <= 0) fail("a KV cache needs at least one block; got {}", num_blocks);
  if (stride_bytes < page_bytes) {
    fail("block stride of {} bytes is smaller than the {}-byte page", stride_bytes, page_bytes);
  }
  if (stride_bytes % element != 0 || placement.offset_bytes % element != 0) {
    fail(
        "page placement (offset {} bytes, block stride {} bytes) is not a whole number of {} "
        "elements",
        placement.offset_bytes, stride_bytes, dtype_name(page.dtype));
  }
  const int64_t end = placement.offset_bytes + (num_blocks - 1) * stride_bytes + page_bytes;
  if (placement.offset_bytes < 0 || end > buffer.numel()) {
    fail("{} pages of {} bytes at offset {} with block stride {} need {} bytes; the buffer has {}",
         num_blocks, page_bytes, placement.offset_bytes, stride_bytes, end, buffer.numel());
  }

  const Shape logical = backend.kv_cache_shape(num_blocks, page, LayersDim::kExcluded);
  const std::vector<int> order = backend.kv_cache_stride_order(page, LayersDim::kExcluded);
  PAGODA_CHECK(order.size() == logical.size(), "stride order {} for shape {}", order, logical);
  const bool simple = placement.offset_bytes == 0 && stride_bytes == page_bytes;
  if (order.front() != 0 && !simple) {
    fail(
        "attention backend '{}' does not keep num_blocks outermost, so it cannot read pages at "
        "offset {} with block stride {} bytes (page {} bytes)",
        backend.name(), placement.offset_bytes, stride_bytes, page_bytes);
  }

  // Row-major strides over the physical order; then num_blocks takes the placement's stride.
  Shape physical(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    physical[i] = logical[order[i]];
  const Shape physical_strides = contiguous_strides(physical);
  Shape strides(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    strides[order[i]] = physical_strides[i];
  if (order.front() == 0) strides[0] = stride_bytes / element;

  KvCacheView view;
  view.cache =
      buffer.reinterpret(page.dtype).as_strided(logical, strides, placement.offset_bytes / element);
  view.block_stride = strides[0];
  if (page.split_kv()) {
    view.key = view.cache.narrow(3, 0, page.head_size_k);
    view.value = view.cache.narrow(3, page.head_size_k, page.head_size_v);
  } else {
    view.key = view.cache.select(1, 0);
    view.value = view.cache.select(1, 1);
  }
  return view;
}

}  // namespace pagoda
