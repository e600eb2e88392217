#include "core/storage.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "scratch_dir.h"

namespace pagoda {
namespace {

TEST(StorageTest, HostStorageIsAlignedAndZeroed) {
  for (int64_t size : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{1000}, int64_t{3} << 20}) {
    auto storage = allocate_host(size);
    EXPECT_EQ(storage->size_bytes(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(storage->data()) % kHostAlignment, 0u);
    for (int64_t i = 0; i < size; ++i)
      ASSERT_EQ(storage->data()[i], std::byte{0});
    EXPECT_TRUE(storage->writable());
    EXPECT_TRUE(storage->device().is_cpu());
  }
  EXPECT_EQ(allocate_host(0)->size_bytes(), 0);
  EXPECT_THROW(allocate_host(-1), Error);
}

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream out(path_, std::ios::binary);
    const float values[] = {1.5f, -2.0f, 3.25f, 0.0f};
    out.write(reinterpret_cast<const char*>(values), sizeof(values));
  }
  testing::ScratchDir scratch_{"mapped_file"};
  std::string path_ = scratch_.file("weights.bin");
};

TEST_F(MappedFileTest, MapsReadOnly) {
  auto storage = map_file_read_only(path_);
  EXPECT_EQ(storage->size_bytes(), 16);
  EXPECT_FALSE(storage->writable());
  const Tensor t = Tensor::from_storage(storage, DType::kF32, {2, 2}, {2, 1}, 0);
  EXPECT_EQ(t.at<float>({0, 0}), 1.5f);
  EXPECT_EQ(t.at<float>({1, 0}), 3.25f);
  EXPECT_THROW(t.fill(0.0), Error);
  EXPECT_THROW(t.copy_from(t.clone()), Error);
  // A view may not reach past the end of the file.
  EXPECT_THROW(Tensor::from_storage(storage, DType::kF32, {5}, {1}, 0), Error);
  EXPECT_THROW(Tensor::from_storage(storage, DType::kF32, {4}, {1}, 4), Error);
}

TEST(StorageTest, MissingFileNamesThePath) {
  try {
    map_file_read_only("/nonexistent/pagoda/weights.safetensors");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/pagoda/weights.safetensors"),
              std::string::npos);
  }
  EXPECT_THROW(map_file_read_only(::testing::TempDir()), Error);  // a directory
  // A FIFO (a shard a hostile index names) is refused at once instead of blocking the open.
  const testing::ScratchDir scratch("fifo");
  const std::string fifo = scratch.file("weights.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(map_file_read_only(fifo), Error);
}

TEST(StorageTest, CopyBytesBetweenHostStorages) {
  auto a = allocate_host(8);
  auto b = allocate_host(8);
  for (int i = 0; i < 8; ++i)
    a->data()[i] = std::byte(i + 1);
  copy_bytes(*b, 2, *a, 4, 4);
  EXPECT_EQ(b->data()[1], std::byte{0});
  EXPECT_EQ(b->data()[2], std::byte{5});
  EXPECT_EQ(b->data()[5], std::byte{8});
  EXPECT_EQ(b->data()[6], std::byte{0});
}

TEST(StorageTest, DeviceParsing) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).to_string(), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"}) {
    EXPECT_THROW(parse_device(bad), Error) << bad;
  }
}

TEST(StorageTest, MissingCudaDeviceIsAClearError) {
  // Without CUDA in the build, without a GPU, or with fewer than 100 GPUs: an Error, not a crash.
  EXPECT_THROW(allocate(16, Device::cuda(99)), Error);
  if (!built_with_cuda()) {
    try {
      allocate(16, Device::cuda(0));
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("without CUDA"), std::string::npos);
    }
  }
}

TEST(StorageTest, DeviceRoundTrip) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Tensor host = Tensor::empty({3, 5}, DType::kF32);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j)
      host.at<float>({i, j}) = static_cast<float>(i * 10 + j);
  }
  const Tensor device = host.to(Device::cuda(0));
  EXPECT_EQ(device.device(), Device::cuda(0));
  // A strided copy on the device (a transpose), a strided fill, then back to the host.
  const Tensor transposed = device.permute({1, 0}).contiguous();
  transposed.narrow(0, 1, 1).fill(-1.0);
  const Tensor back = transposed.to(Device::cpu());
  EXPECT_EQ(back.shape(), (Shape{5, 3}));
  EXPECT_EQ(back.at<float>({0, 2}), 20.0f);
  EXPECT_EQ(back.at<float>({1, 0}), -1.0f);
  EXPECT_EQ(back.at<float>({4, 1}), 14.0f);
  // Host -> strided device destination.
  const Tensor target = Tensor::empty({5, 3}, DType::kF32, Device::cuda(0));
  target.permute({1, 0}).copy_from(host);
  EXPECT_EQ(target.to(Device::cpu()).at<float>({4, 2}), 24.0f);
}

}  // namespace
}  // namespace pagoda
