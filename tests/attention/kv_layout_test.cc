#include "attention/kv_layout.h"

#include <gtest/gtest.h>

#include "attention/cpu/cpu_backend.h"
#include "attention/page_shapes.h"

namespace pagoda {
namespace {

using testing::kEqual;
using testing::kSplit;

TEST(KvLayoutTest, PageBytes) {
  EXPECT_EQ(kEqual.bytes_per_token(), 2 * 16 * 4);
  EXPECT_EQ(kEqual.page_bytes(), 4 * 2 * 16 * 4);
  EXPECT_EQ(kSplit.page_bytes(), 4 * 2 * 20 * 4);
  EXPECT_FALSE(kEqual.split_kv());
  EXPECT_TRUE(kSplit.split_kv());
}

TEST(KvLayoutTest, LogicalShapes) {
  EXPECT_EQ(paged_kv_shape(10, kEqual, LayersDim::kExcluded), (Shape{10, 2, 4, 2, 8}));
  EXPECT_EQ(paged_kv_shape(10, kEqual, LayersDim::kIncluded, 3), (Shape{3, 10, 2, 4, 2, 8}));
  EXPECT_EQ(paged_kv_shape(10, kSplit, LayersDim::kExcluded), (Shape{10, 4, 2, 20}));
}

TEST(KvLayoutTest, StrideOrders) {
  struct Case {
    PageOrder order;
    KvPageShape page;
    LayersDim layers;
    std::vector<int> expected;
  };
  const Case cases[] = {
      {PageOrder::kNhd, kEqual, LayersDim::kExcluded, {0, 1, 2, 3, 4}},
      {PageOrder::kHnd, kEqual, LayersDim::kExcluded, {0, 1, 3, 2, 4}},
      {PageOrder::kNhd, kEqual, LayersDim::kIncluded, {1, 0, 2, 3, 4, 5}},
      {PageOrder::kHnd, kEqual, LayersDim::kIncluded, {1, 0, 2, 4, 3, 5}},
      {PageOrder::kNhd, kSplit, LayersDim::kExcluded, {0, 1, 2, 3}},
      {PageOrder::kHnd, kSplit, LayersDim::kExcluded, {0, 2, 1, 3}},
      {PageOrder::kHnd, kSplit, LayersDim::kIncluded, {1, 0, 3, 2, 4}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(paged_kv_stride_order(c.order, c.page, c.layers), c.expected)
        << page_order_name(c.order);
  }
}

TEST(KvLayoutTest, BlockStrideIndexingIsDerived) {
  EXPECT_TRUE(stride_order_indexes_kv_by_block_stride({1, 0, 2, 3, 4, 5}));
  EXPECT_TRUE(stride_order_indexes_kv_by_block_stride({2, 0, 1, 3, 4, 5}));
  EXPECT_FALSE(stride_order_indexes_kv_by_block_stride({0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(cpu_attention_backend().indexes_kv_by_block_stride(kEqual));
  EXPECT_TRUE(cpu_attention_backend().indexes_kv_by_block_stride(kSplit));
}

}  // namespace
}  // namespace pagoda
