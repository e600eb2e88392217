#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace pagoda {
namespace {

// A [rows, cols] float tensor with value 100 * r + c.
Tensor iota(int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      t.at<float>({r, c}) = static_cast<float>(100 * r + c);
  }
  return t;
}

TEST(TensorTest, EmptyIsContiguousAndZeroed) {
  const Tensor t = Tensor::empty({2, 3, 4}, DType::kBF16);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.storage()->size_bytes(), 48);
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(t.view({-1}).at<uint16_t>({i}), 0);
  EXPECT_THROW(Tensor::empty({2, -1}, DType::kF32), Error);
}

TEST(TensorTest, ViewAndReshape) {
  const Tensor t = iota(4, 6);
  const Tensor v = t.view({2, -1, 3});
  EXPECT_EQ(v.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(v.at<float>({1, 0, 2}), 202.0f);  // element 14 = row 2, col 2
  EXPECT_EQ(v.storage(), t.storage());
  EXPECT_THROW(t.view({5, -1}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.view({7, 3}), Error);
  const Tensor transposed = t.permute({1, 0});
  EXPECT_THROW(transposed.view({24}), Error);
  const Tensor flat = transposed.reshape({24});
  EXPECT_NE(flat.storage(), t.storage());  // reshape of a non-contiguous tensor copies
  EXPECT_EQ(flat.at<float>({1}), 100.0f);
}

TEST(TensorTest, PermuteNarrowSelect) {
  const Tensor t = iota(3, 5);
  const Tensor p = t.permute({1, 0});
  EXPECT_EQ(p.shape(), (Shape{5, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 5}));
  EXPECT_EQ(p.at<float>({4, 2}), 204.0f);
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_THROW(t.permute({0, 0}), Error);
  EXPECT_THROW(t.permute({0}), Error);

  const Tensor n = t.narrow(1, 2, 3);
  EXPECT_EQ(n.shape(), (Shape{3, 3}));
  EXPECT_EQ(n.offset_bytes(), 8);
  EXPECT_EQ(n.at<float>({2, 0}), 202.0f);
  EXPECT_THROW(t.narrow(1, 3, 3), Error);
  EXPECT_THROW(t.narrow(2, 0, 1), Error);

  const Tensor row = t.select(0, 2);
  EXPECT_EQ(row.shape(), (Shape{5}));
  EXPECT_EQ(row.at<float>({4}), 204.0f);
  const Tensor column = t.select(-1, 1);
  EXPECT_EQ(column.strides(), (Shape{5}));
  EXPECT_EQ(column.at<float>({2}), 201.0f);
  EXPECT_THROW(t.select(0, 3), Error);
}

TEST(TensorTest, AsStridedChecksBounds) {
  const Tensor t = iota(4, 4);
  // The diagonal.
  const Tensor diagonal = t.as_strided({4}, {5}, 0);
  EXPECT_EQ(diagonal.at<float>({3}), 303.0f);
  const Tensor offset = t.as_strided({2, 2}, {4, 1}, 5);
  EXPECT_EQ(offset.at<float>({1, 1}), 202.0f);
  EXPECT_THROW(t.as_strided({4}, {5}, 1), Error);           // last element would be 16
  EXPECT_THROW(t.as_strided({2}, {-1}, 4), Error);          // negative strides are refused
  EXPECT_NO_THROW(t.as_strided({0, 9}, {1000, 1000}, 16));  // empty views touch nothing
  // Views whose extent wraps past 64 bits back into the storage are refused too.
  const int64_t huge = int64_t{1} << 62;
  EXPECT_THROW(t.as_strided({3}, {huge}, 0), Error);  // 2 * 2^62 elements
  EXPECT_THROW(t.as_strided({2, 2}, {huge, huge}, 0), Error);
  EXPECT_THROW(t.as_strided({5}, {int64_t{1} << 61}, 0), Error);  // 4 * 2^61 * 4 bytes
}

// Shapes whose element or byte count passes 64 bits are refused before anything is allocated
// (the product of a hostile config's vocabulary and hidden sizes, say), instead of wrapping to a
// small or zero-byte storage.
TEST(TensorTest, ShapesPast64BitSizesAreRefused) {
  EXPECT_THROW(Tensor::empty({int64_t{1} << 40, int64_t{1} << 24}, DType::kF32), Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 31, int64_t{1} << 31, 4}, DType::kBF16), Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 61}, DType::kF32), Error);  // 2^63 bytes
  EXPECT_THROW(shape_numel({int64_t{1} << 32, int64_t{1} << 32}), Error);
  EXPECT_THROW(contiguous_strides({int64_t{1} << 32, int64_t{1} << 32, 2}), Error);
  EXPECT_EQ(shape_numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_EQ(shape_numel({int64_t{1} << 62, 0}), 0);
}

TEST(TensorTest, ReinterpretSameBytes) {
  const Tensor bytes = Tensor::empty({2, 8}, DType::kU8);
  const Tensor words = bytes.reinterpret(DType::kF32);
  EXPECT_EQ(words.shape(), (Shape{2, 2}));
  EXPECT_EQ(words.strides(), (Shape{2, 1}));
  words.at<float>({1, 0}) = 1.0f;  // 0x3f800000, little-endian at bytes 8..11
  EXPECT_EQ(bytes.at<uint8_t>({1, 3}), 0x3f);
  EXPECT_EQ(bytes.at<uint8_t>({1, 2}), 0x80);
  const Tensor back = words.reinterpret(DType::kBF16);
  EXPECT_EQ(back.shape(), (Shape{2, 4}));
  EXPECT_EQ(back.at<uint16_t>({1, 1}), 0x3f80);
  EXPECT_THROW(Tensor::empty({3}, DType::kU8).reinterpret(DType::kF32), Error);
  EXPECT_THROW(iota(2, 2).permute({1, 0}).reinterpret(DType::kU8), Error);
  EXPECT_THROW(bytes.narrow(1, 1, 4).reinterpret(DType::kF32), Error);  // misaligned offset
}

TEST(TensorTest, ContiguousCopiesStridedViews) {
  const Tensor t = iota(3, 4);
  const Tensor c = t.permute({1, 0}).contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(c.at<float>({3, 2}), 203.0f);
  EXPECT_EQ(t.contiguous().storage(), t.storage());
  const Tensor copy = t.clone();
  copy.fill(7.0);
  EXPECT_EQ(t.at<float>({0, 0}), 0.0f);  // clones are independent
}

TEST(TensorTest, FillTouchesOnlyTheView) {
  const Tensor t = iota(4, 4);
  t.narrow(0, 1, 2).narrow(1, 1, 2).fill(-1.0);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const bool inside = r >= 1 && r <= 2 && c >= 1 && c <= 2;
      EXPECT_EQ(t.at<float>({r, c}), inside ? -1.0f : static_cast<float>(100 * r + c));
    }
  }
}

TEST(TensorTest, FillConvertsPerDtype) {
  const Tensor half = Tensor::empty({2}, DType::kF16);
  half.fill(1.0);
  EXPECT_EQ(half.at<uint16_t>({1}), 0x3c00);
  const Tensor bf = Tensor::empty({2}, DType::kBF16);
  bf.fill(-2.0);
  EXPECT_EQ(bf.at<uint16_t>({0}), 0xc000);
  const Tensor ints = Tensor::empty({2}, DType::kI64);
  ints.fill(-5);
  EXPECT_EQ(ints.at<int64_t>({1}), -5);
  EXPECT_THROW(Tensor::empty({1}, DType::kI32).fill(0.5), Error);
  EXPECT_THROW(Tensor::empty({1}, DType::kU8).fill(256), Error);
}

TEST(TensorTest, CopyFromChecksShapeAndDtype) {
  const Tensor dst = Tensor::empty({3, 4}, DType::kF32);
  dst.copy_from(iota(4, 3).permute({1, 0}).contiguous().permute({1, 0}).permute({1, 0}));
  EXPECT_EQ(dst.at<float>({2, 3}), 302.0f);
  EXPECT_THROW(dst.copy_from(iota(4, 3)), Error);
  EXPECT_THROW(dst.copy_from(Tensor::empty({3, 4}, DType::kF16)), Error);
}

}  // namespace
}  // namespace pagoda
