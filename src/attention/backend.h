// The attention backend contract (DESIGN.md §3, §4): cache layout, what a backend computes, the
// plans it makes to run, and the reshape of a raw KV buffer into the views a backend reads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention_plan.h"
#include "attention/kv_layout.h"

namespace pagoda {

// Attention variants a backend computes. A model needing one that is false is refused at startup.
struct AttentionFeatures {
  bool sliding_window = false;
  bool logit_softcap = false;
  bool attention_sinks = false;
  bool split_kv_head_sizes = false;  // K and V head sizes that differ
  bool cache_only_queries = false;   // K/V absent: attend over the cache as it is (KV sharing)
};

// Every variant: what the CPU and CUDA backends both compute.
constexpr AttentionFeatures kAllAttentionFeatures{.sliding_window = true,
                                                  .logit_softcap = true,
                                                  .attention_sinks = true,
                                                  .split_kv_head_sizes = true,
                                                  .cache_only_queries = true};

// What a backend's kernels compute: the variants, and the shapes and dtypes they take. A model
// with a layer outside them is refused when its KV cache is planned, before any weight loads.
struct AttentionSupport {
  AttentionFeatures features;
  // (K, V) head sizes the kernels take; empty: any.
  std::vector<std::pair<int64_t, int64_t>> head_sizes;
  int64_t max_q_per_kv = 0;         // query heads per KV head; 0: any
  std::vector<DType> cache_dtypes;  // empty: any KV cache dtype (is_kv_cache_dtype)
  // K and V rows (one head of one token) in the cache's dtype are a whole number of this many
  // bytes; 0: any.
  int64_t row_bytes_multiple = 0;
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;

  virtual std::string name() const = 0;
  virtual const AttentionSupport& support() const = 0;
  // The device its kernels run on.
  virtual DeviceType device_type() const = 0;
  // A plan for one KV cache group on group.device (Error when the backend cannot run there).
  virtual std::unique_ptr<AttentionPlan> make_plan(const AttentionGroup& group) const = 0;
  // Physical order of the dims of kv_cache_shape(), outermost first.
  virtual std::vector<int> kv_cache_stride_order(const KvPageShape& page,
                                                 LayersDim layers) const = 0;

  // Logical shape of the cache (paged_kv_shape); with kIncluded, num_layers leads.
  Shape kv_cache_shape(int64_t num_blocks, const KvPageShape& page, LayersDim layers,
                       int64_t num_layers = 1) const {
    return paged_kv_shape(num_blocks, page, layers, num_layers);
  }
  // Derived from the stride order with the layers dim (see
  // stride_order_indexes_kv_by_block_stride).
  bool indexes_kv_by_block_stride(const KvPageShape& page) const {
    return stride_order_indexes_kv_by_block_stride(
        kv_cache_stride_order(page, LayersDim::kIncluded));
  }
};

// A backend whose kernels walk pages with a runtime block stride in NHD or HND order. Its plans
// come from `make`; without one it only declares a layout (for planning and tests of views).
class PagedAttentionBackend : public AttentionBackend {
 public:
  using PlanMaker = std::unique_ptr<AttentionPlan> (*)(const AttentionGroup& group);
  PagedAttentionBackend(std::string name, PageOrder order, AttentionSupport support,
                        DeviceType device = DeviceType::kCpu, PlanMaker make = nullptr)
      : name_(std::move(name)),
        order_(order),
        support_(std::move(support)),
        device_(device),
        make_(make) {}
  std::string name() const override { return name_; }
  const AttentionSupport& support() const override { return support_; }
  DeviceType device_type() const override { return device_; }
  std::unique_ptr<AttentionPlan> make_plan(const AttentionGroup& group) const override;
  std::vector<int> kv_cache_stride_order(const KvPageShape& page, LayersDim layers) const override {
    return paged_kv_stride_order(order_, page, layers);
  }

 private:
  std::string name_;
  PageOrder order_;
  AttentionSupport support_;
  DeviceType device_;
  PlanMaker make_;
};

// The backends this build has, by name ("cpu", "cuda"). Throws Error naming the value and the
// known names.
const AttentionBackend& find_attention_backend(const std::string& name);
std::vector<std::string> attention_backend_names();
// The backend that runs attention on `device` when none is named.
const AttentionBackend& default_attention_backend(DeviceType device);

// Where one layer's pages sit in a raw buffer: block b's page starts at
// offset_bytes + b * block_stride_bytes.
//   contiguous: offset 0, stride = page bytes
//   padded:     offset 0, stride = padded page bytes
//   packed:     offset = slot * page bytes, stride = pages per block id * page bytes
struct PagePlacement {
  int64_t offset_bytes = 0;
  int64_t block_stride_bytes = 0;
};

// Views `buffer` (1-D uint8) as `num_blocks` pages placed per `placement`. Throws Error when the
// placement is not a whole number of elements, overlaps pages, runs past the buffer, or needs
// block-stride indexing the backend lacks.
KvCacheView reshape_kv_cache(const Tensor& buffer, const AttentionBackend& backend,
                             const KvPageShape& page, int64_t num_blocks,
                             const PagePlacement& placement);

}  // namespace pagoda
