// NCCL communicators over every GPU of the machine (one thread per GPU): each collective against
// the sums computed on the host, a collective captured in a CUDA graph and replayed, and a tensor
// on the wrong device refused, and a group one of whose ranks cannot join. Skipped without a GPU or
// without NCCL in the build.
#include "parallel/nccl_communicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/cuda/graph.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

// Rank r's input: small integers over 8, which bf16 and f32 hold and sum exactly.
Tensor rank_input(int r, int64_t n, DType dtype) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    cpu::store_float(t.raw_data() + i * t.element_size(), dtype,
                     static_cast<float>((i * 7 + r * 13) % 17 - 8) / 8.0f);
  }
  return t;
}

std::vector<float> floats(const Tensor& device_tensor) {
  const Tensor t = device_tensor.to(Device::cpu());
  std::vector<float> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = cpu::load_float(t.raw_data() + i * t.element_size(), t.dtype());
  return out;
}

std::vector<int> all_devices() {
  std::vector<int> devices(cuda_device_count());
  for (size_t d = 0; d < devices.size(); ++d)
    devices[d] = static_cast<int>(d);
  return devices;
}

TEST(NcclCommunicatorTest, CollectivesGiveTheHostSums) {
  if (!nccl_available_in_build() || cuda_device_count() == 0) GTEST_SKIP() << "no NCCL or GPU";
  const std::vector<int> devices = all_devices();
  const int world = static_cast<int>(devices.size());
  const int64_t n = 48 * world;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<float> sum(n, 0.0f);
    for (int r = 0; r < world; ++r) {
      const Tensor x = rank_input(r, n, dtype);
      for (int64_t i = 0; i < n; ++i)
        sum[i] += cpu::load_float(x.raw_data() + i * x.element_size(), dtype);
    }
    run_nccl_ranks(devices, [&](Communicator& comm) {
      const int r = comm.rank();
      const Device device = Device::cuda(devices[r]);
      const Tensor x = rank_input(r, n, dtype).to(device);
      comm.all_reduce(x);
      EXPECT_EQ(floats(x), sum) << "rank " << r;

      const Tensor all = Tensor::empty({world * n}, dtype, device);
      comm.all_gather(rank_input(r, n, dtype).to(device), all);
      const std::vector<float> gathered = floats(all);
      for (int q = 0; q < world; ++q) {
        const std::vector<float> theirs = floats(rank_input(q, n, dtype).to(device));
        EXPECT_TRUE(std::equal(theirs.begin(), theirs.end(), gathered.begin() + q * n));
      }

      const Tensor shard = Tensor::empty({n / world}, dtype, device);
      comm.reduce_scatter(rank_input(r, n, dtype).to(device), shard);
      EXPECT_EQ(floats(shard), std::vector<float>(sum.begin() + r * (n / world),
                                                  sum.begin() + (r + 1) * (n / world)));

      const Tensor y = rank_input(r, n, dtype).to(device);
      comm.broadcast(y, world - 1);
      EXPECT_EQ(floats(y), floats(rank_input(world - 1, n, dtype).to(device)));

      // Captured in a graph on the engine stream and replayed twice: each replay sums again.
      const Tensor z = rank_input(r, n, dtype).to(device);
      cuda::Graph graph;
      graph.capture([&] { comm.all_reduce(z); });
      graph.replay();
      graph.replay();
      std::vector<float> twice = sum;
      for (float& v : twice)
        v *= static_cast<float>(world);
      EXPECT_EQ(floats(z), twice) << "rank " << r;

      // A host tensor is refused before NCCL sees it.
      EXPECT_THROW(comm.all_reduce(rank_input(r, n, dtype)), Error);
    });
  }
}

// A rank that cannot join (its GPU does not exist) stops the others waiting for it in NCCL's
// initialisation, and its own error is the one reported, not theirs.
TEST(NcclCommunicatorTest, ARankThatCannotJoinStopsTheOthers) {
  if (!nccl_available_in_build() || cuda_device_count() == 0) GTEST_SKIP() << "no NCCL or GPU";
  const std::vector<int> devices = {0, cuda_device_count()};
  const auto expect_own_error = [](const std::function<void()>& start) {
    try {
      start();
      ADD_FAILURE() << "a group with a missing GPU started";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("cudaSetDevice"), std::string::npos) << message;
    }
  };
  expect_own_error([&] { make_nccl_group(devices); });
  bool body_ran = false;
  expect_own_error([&] { run_nccl_ranks(devices, [&](Communicator&) { body_ran = true; }); });
  EXPECT_FALSE(body_ran);
  // The GPU serves a group afterwards.
  run_nccl_ranks({0}, [](Communicator& comm) {
    const Tensor x = rank_input(0, 64, DType::kF32).to(Device::cuda(0));
    comm.all_reduce(x);
    EXPECT_EQ(floats(x), floats(rank_input(0, 64, DType::kF32).to(Device::cuda(0))));
  });
}

}  // namespace
}  // namespace pagoda
