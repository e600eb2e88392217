#include "attention/backend.h"

#include <gtest/gtest.h>

#include <cstring>

#include "attention/cpu/cpu_backend.h"
#include "attention/page_shapes.h"
#include "core/error.h"

namespace pagoda {
namespace {

// A backend that stores all K pages, then all V pages ([2, num_blocks, ...] physically) and puts
// the layers dim outermost: it cannot read padded or interleaved pages.
class KvFirstBackend final : public AttentionBackend {
 public:
  std::string name() const override { return "kv-first"; }
  const AttentionSupport& support() const override {
    static const AttentionSupport none;
    return none;
  }
  DeviceType device_type() const override { return DeviceType::kCpu; }
  std::unique_ptr<AttentionPlan> make_plan(const AttentionGroup&) const override {
    fail("a layout-only backend runs nothing");
  }
  std::vector<int> kv_cache_stride_order(const KvPageShape&, LayersDim layers) const override {
    if (layers == LayersDim::kIncluded) return {0, 2, 1, 3, 4, 5};
    return {1, 0, 2, 3, 4};
  }
};

using testing::kEqual;
using testing::kSplit;
constexpr int64_t kBlocks = 3;

Tensor byte_buffer(int64_t size) {
  return Tensor::empty({size}, DType::kU8);
}

const PagedAttentionBackend kNhd("nhd", PageOrder::kNhd, {});
const PagedAttentionBackend kHnd("hnd", PageOrder::kHnd, {});

// Expected element strides and offsets, per layout and placement.
struct StrideCase {
  const char* label;
  const AttentionBackend* backend;
  KvPageShape page;
  PagePlacement placement;
  Shape cache_strides;
  Shape key_strides;
  Shape value_strides;
  int64_t value_offset_elements;  // of block 0's V, from the buffer start
};

TEST(ReshapeTest, StridesAndOffsets) {
  const int64_t equal_page = kEqual.page_bytes();  // 512 bytes = 128 floats
  const int64_t split_page = kSplit.page_bytes();  // 640 bytes = 160 floats
  const StrideCase cases[] = {
      {"NHD contiguous",
       &kNhd,
       kEqual,
       {0, equal_page},
       {128, 64, 16, 8, 1},
       {128, 16, 8, 1},
       {128, 16, 8, 1},
       64},
      {"NHD padded",
       &kNhd,
       kEqual,
       {0, equal_page + 256},
       {192, 64, 16, 8, 1},
       {192, 16, 8, 1},
       {192, 16, 8, 1},
       64},
      {"NHD packed slot 1 of 3",
       &kNhd,
       kEqual,
       {equal_page, 3 * equal_page},
       {384, 64, 16, 8, 1},
       {384, 16, 8, 1},
       {384, 16, 8, 1},
       128 + 64},
      {"HND contiguous",
       &kHnd,
       kEqual,
       {0, equal_page},
       {128, 64, 8, 32, 1},
       {128, 8, 32, 1},
       {128, 8, 32, 1},
       64},
      {"HND padded",
       &kHnd,
       kEqual,
       {0, 2 * equal_page},
       {256, 64, 8, 32, 1},
       {256, 8, 32, 1},
       {256, 8, 32, 1},
       64},
      {"HND packed slot 2 of 3",
       &kHnd,
       kEqual,
       {2 * equal_page, 3 * equal_page},
       {384, 64, 8, 32, 1},
       {384, 8, 32, 1},
       {384, 8, 32, 1},
       256 + 64},
      {"split NHD contiguous",
       &kNhd,
       kSplit,
       {0, split_page},
       {160, 40, 20, 1},
       {160, 40, 20, 1},
       {160, 40, 20, 1},
       12},
      {"split NHD padded",
       &kNhd,
       kSplit,
       {0, split_page + 64},
       {176, 40, 20, 1},
       {176, 40, 20, 1},
       {176, 40, 20, 1},
       12},
      {"split HND packed slot 1 of 2",
       &kHnd,
       kSplit,
       {split_page, 2 * split_page},
       {320, 20, 80, 1},
       {320, 20, 80, 1},
       {320, 20, 80, 1},
       160 + 12},
  };
  for (const StrideCase& c : cases) {
    SCOPED_TRACE(c.label);
    const int64_t size = c.placement.offset_bytes + kBlocks * c.placement.block_stride_bytes;
    const Tensor buffer = byte_buffer(size);
    const KvCacheView view = reshape_kv_cache(buffer, *c.backend, c.page, kBlocks, c.placement);
    EXPECT_EQ(view.cache.shape(), paged_kv_shape(kBlocks, c.page, LayersDim::kExcluded));
    EXPECT_EQ(view.cache.strides(), c.cache_strides);
    EXPECT_EQ(view.key.shape(), (Shape{kBlocks, 4, 2, c.page.head_size_k}));
    EXPECT_EQ(view.value.shape(), (Shape{kBlocks, 4, 2, c.page.head_size_v}));
    EXPECT_EQ(view.key.strides(), c.key_strides);
    EXPECT_EQ(view.value.strides(), c.value_strides);
    EXPECT_EQ(view.block_stride, c.placement.block_stride_bytes / 4);
    EXPECT_EQ(view.key.offset_bytes(), c.placement.offset_bytes);
    EXPECT_EQ(view.value.offset_bytes(), c.value_offset_elements * 4);
    // Block 1 starts one block stride later.
    EXPECT_EQ(view.key.select(0, 1).offset_bytes(),
              c.placement.offset_bytes + c.placement.block_stride_bytes);
    EXPECT_EQ(view.cache.storage(), buffer.storage());
  }
}

// Writing block b through K and V fills exactly bytes [start, start + page) of that block.
TEST(ReshapeTest, WritesStayInsideTheirPage) {
  struct Case {
    const char* label;
    const AttentionBackend* backend;
    KvPageShape page;
    int64_t padding_bytes;
    int64_t slots;  // pages per block id; this layer takes the last slot
  };
  const Case cases[] = {
      {"NHD", &kNhd, kEqual, 0, 1},
      {"HND", &kHnd, kEqual, 0, 1},
      {"NHD padded", &kNhd, kEqual, 128, 1},
      {"HND padded", &kHnd, kEqual, 384, 1},
      {"NHD packed", &kNhd, kEqual, 0, 3},
      {"HND packed", &kHnd, kEqual, 0, 2},
      {"split NHD", &kNhd, kSplit, 0, 1},
      {"split HND padded", &kHnd, kSplit, 64, 1},
      {"split NHD packed", &kNhd, kSplit, 0, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const int64_t slot_bytes = c.page.page_bytes() + c.padding_bytes;
    const PagePlacement placement{.offset_bytes = (c.slots - 1) * slot_bytes,
                                  .block_stride_bytes = c.slots * slot_bytes};
    const Tensor buffer = byte_buffer(kBlocks * c.slots * slot_bytes);
    const KvCacheView view = reshape_kv_cache(buffer, *c.backend, c.page, kBlocks, placement);
    for (int64_t block = 0; block < kBlocks; ++block) {
      buffer.fill(0xAB);
      view.key.select(0, block).fill(1.0);
      view.value.select(0, block).fill(2.0);
      const int64_t start = placement.offset_bytes + block * placement.block_stride_bytes;
      const int64_t end = start + c.page.page_bytes();
      int64_t untouched = 0;
      for (int64_t byte = 0; byte < buffer.numel(); ++byte) {
        const bool inside = byte >= start && byte < end;
        const bool changed = buffer.at<uint8_t>({byte}) != 0xAB;
        // Every float 1.0f or 2.0f has no 0xAB byte, so each byte of the page shows the write.
        ASSERT_EQ(changed, inside) << "block " << block << " byte " << byte;
        untouched += !changed;
      }
      EXPECT_EQ(untouched, buffer.numel() - c.page.page_bytes());
    }
  }
}

TEST(ReshapeTest, RefusesBadPlacements) {
  const int64_t page = kEqual.page_bytes();
  const Tensor buffer = byte_buffer(kBlocks * page);
  // Stride smaller than a page, past the end, not a whole number of elements.
  EXPECT_THROW(reshape_kv_cache(buffer, kNhd, kEqual, kBlocks, {0, page - 4}), Error);
  EXPECT_THROW(reshape_kv_cache(buffer, kNhd, kEqual, kBlocks, {4, page}), Error);
  EXPECT_THROW(reshape_kv_cache(buffer, kNhd, kEqual, kBlocks, {0, page + 2}), Error);
  EXPECT_THROW(reshape_kv_cache(buffer, kNhd, kEqual, 0, {0, page}), Error);
}

TEST(ReshapeTest, BackendWithoutBlockStrideOnlyTakesContiguousBuffers) {
  const KvFirstBackend backend;
  EXPECT_FALSE(backend.indexes_kv_by_block_stride(kEqual));
  const int64_t page = kEqual.page_bytes();
  const KvCacheView view =
      reshape_kv_cache(byte_buffer(kBlocks * page), backend, kEqual, kBlocks, {0, page});
  // All K pages first: K of block 1 follows K of block 0; V starts after every K page.
  EXPECT_EQ(view.key.strides(), (Shape{64, 16, 8, 1}));
  EXPECT_EQ(view.value.offset_bytes(), kBlocks * page / 2);
  try {
    reshape_kv_cache(byte_buffer(kBlocks * 2 * page), backend, kEqual, kBlocks, {0, 2 * page});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("kv-first"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagoda
