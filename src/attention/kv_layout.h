// The layout contract between the KV cache and attention backends (DESIGN.md §3).
//
// A backend declares the *logical* shape of one layer's cache and a *stride order*: the physical
// order of those dims, outermost first. With a leading num_layers dim the same is declared for a
// cache that holds every layer. Logical shapes:
//   equal K/V head sizes:  [num_blocks, 2, block_size, num_kv_heads, head_size]   (2 = K, V)
//   split K/V head sizes:  [num_blocks, block_size, num_kv_heads, head_size_k + head_size_v]
// Page orders (the physical order inside one page):
//   NHD: [2][block_size][num_kv_heads][head]   or  [block_size][num_kv_heads][k | v]
//   HND: [2][num_kv_heads][block_size][head]   or  [num_kv_heads][block_size][k | v]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace pagoda {

// The geometry of one page: what one block of one layer stores.
struct KvPageShape {
  int64_t block_size = 0;  // tokens per block
  int64_t num_kv_heads = 0;
  int64_t head_size_k = 0;
  int64_t head_size_v = 0;
  DType dtype = DType::kBF16;

  bool split_kv() const { return head_size_k != head_size_v; }
  int64_t bytes_per_token() const {
    return num_kv_heads * (head_size_k + head_size_v) * dtype_size(dtype);
  }
  int64_t page_bytes() const { return block_size * bytes_per_token(); }
  bool operator==(const KvPageShape&) const = default;
};

enum class PageOrder { kNhd, kHnd };
enum class LayersDim { kExcluded, kIncluded };

std::string_view page_order_name(PageOrder order);  // "NHD", "HND"

// Logical shape of one layer's cache (see the file comment), with num_layers in front when
// `layers` is kIncluded.
Shape paged_kv_shape(int64_t num_blocks, const KvPageShape& page, LayersDim layers,
                     int64_t num_layers = 1);

// Stride order of the paged layout for `order`. With the layers dim included, num_blocks stays
// outermost and the layers dim comes second, so every layer's page of block b is adjacent.
std::vector<int> paged_kv_stride_order(PageOrder order, const KvPageShape& page, LayersDim layers);

// True when, with the layers dim included, the layers dim is not outermost: the kernel then walks
// pages by a runtime block stride, so padded pages and interleaved layers are safe to give it.
bool stride_order_indexes_kv_by_block_stride(const std::vector<int>& with_layers);

}  // namespace pagoda
