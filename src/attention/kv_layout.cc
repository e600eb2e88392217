#include "attention/kv_layout.h"

namespace pagoda {

std::string_view page_order_name(PageOrder order) {
  return order == PageOrder::kNhd ? "NHD" : "HND";
}

Shape paged_kv_shape(int64_t num_blocks, const KvPageShape& page, LayersDim layers,
                     int64_t num_layers) {
  Shape shape;
  if (layers == LayersDim::kIncluded) shape.push_back(num_layers);
  if (page.split_kv()) {
    shape.insert(shape.end(), {num_blocks, page.block_size, page.num_kv_heads,
                               page.head_size_k + page.head_size_v});
  } else {
    shape.insert(shape.end(),
                 {num_blocks, 2, page.block_size, page.num_kv_heads, page.head_size_k});
  }
  return shape;
}

std::vector<int> paged_kv_stride_order(PageOrder order, const KvPageShape& page, LayersDim layers) {
  // Per-layer orders; the tokens and heads dims swap for HND.
  std::vector<int> per_layer;
  if (page.split_kv()) {
    per_layer =
        order == PageOrder::kNhd ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0, 2, 1, 3};
  } else {
    per_layer = order == PageOrder::kNhd ? std::vector<int>{0, 1, 2, 3, 4}
                                         : std::vector<int>{0, 1, 3, 2, 4};
  }
  if (layers == LayersDim::kExcluded) return per_layer;
  // Logical dims shift by one behind the layers dim (logical 0); physically: blocks, layers, page.
  std::vector<int> with_layers = {1, 0};
  for (size_t i = 1; i < per_layer.size(); ++i)
    with_layers.push_back(per_layer[i] + 1);
  return with_layers;
}

bool stride_order_indexes_kv_by_block_stride(const std::vector<int>& with_layers) {
  return !with_layers.empty() && with_layers.front() != 0;
}

}  // namespace pagoda
