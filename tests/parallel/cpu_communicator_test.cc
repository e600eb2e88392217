// In-process CPU ranks: every collective against the same sums computed serially, for 1 to 4 ranks
// and each float dtype; and every way a group can go wrong (mismatched shapes or outputs, a rank
// failing in its own code, a rank calling one collective more) ends in an Error on every rank,
// never a hang.
#include "parallel/cpu_communicator.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

// Rank r's input: seeded by r, of `shape`, values that bf16 holds exactly (so sums compare
// exactly in f32).
Tensor rank_input(int r, const Shape& shape, DType dtype) {
  std::mt19937 rng(100 + r);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = static_cast<float>(std::uniform_int_distribution<int>(-64, 64)(rng)) / 8.0f;
    cpu::store_float(t.raw_data() + i * t.element_size(), dtype, v);
  }
  return t;
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    out[i] = cpu::load_float(t.raw_data() + i * t.element_size(), t.dtype());
  return out;
}

// The elementwise sum of every rank's input.
std::vector<float> serial_sum(int world, const Shape& shape, DType dtype) {
  std::vector<float> sum(floats(rank_input(0, shape, dtype)).size(), 0.0f);
  for (int r = 0; r < world; ++r) {
    const std::vector<float> x = floats(rank_input(r, shape, dtype));
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] += x[i];
  }
  return sum;
}

class CpuCommunicatorTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CpuCommunicatorTest, CollectivesGiveTheSerialResults) {
  const int world = std::get<0>(GetParam());
  const DType dtype = std::get<1>(GetParam());
  const Shape shape = {world * 3, 5};
  const std::vector<float> sum = serial_sum(world, shape, dtype);
  std::vector<std::vector<float>> reduced(world), gathered(world), scattered(world),
      broadcast(world);
  run_cpu_ranks(world, [&](Communicator& comm) {
    const int r = comm.rank();
    EXPECT_EQ(comm.world_size(), world);
    Tensor x = rank_input(r, shape, dtype);
    comm.all_reduce(x);
    reduced[r] = floats(x);

    const Tensor mine = rank_input(r, shape, dtype);
    Tensor all = Tensor::empty({world * shape[0], shape[1]}, dtype);
    comm.all_gather(mine, all);
    gathered[r] = floats(all);

    Tensor shard = Tensor::empty({shape[0] / world, shape[1]}, dtype);
    comm.reduce_scatter(rank_input(r, shape, dtype), shard);
    scattered[r] = floats(shard);

    Tensor y = rank_input(r, shape, dtype);
    comm.broadcast(y, world - 1);
    broadcast[r] = floats(y);
  });
  const std::vector<float> last = floats(rank_input(world - 1, shape, dtype));
  const int64_t per_rank = sum.size() / world;
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(reduced[r], sum);
    for (int q = 0; q < world; ++q) {
      const std::vector<float> x = floats(rank_input(q, shape, dtype));
      EXPECT_TRUE(std::equal(x.begin(), x.end(), gathered[r].begin() + q * x.size()));
    }
    EXPECT_EQ(scattered[r],
              std::vector<float>(sum.begin() + r * per_rank, sum.begin() + (r + 1) * per_rank));
    EXPECT_EQ(broadcast[r], last);
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndDtypes, CpuCommunicatorTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16)),
                         [](const auto& info) {
                           return fmt::format("{}_ranks_{}", std::get<0>(info.param),
                                              dtype_name(std::get<1>(info.param)));
                         });

// `body` on 3 ranks fails: every rank's error is recorded, and run_cpu_ranks rethrows one that
// contains `expected`.
void expect_group_failure(const std::function<void(Communicator&)>& body,
                          const std::string& expected, int world = 3) {
  std::vector<std::string> seen(world);
  try {
    run_cpu_ranks(world, [&](Communicator& comm) {
      try {
        body(comm);
      } catch (const Error& error) {
        seen[comm.rank()] = error.what();
        throw;
      }
    });
    ADD_FAILURE() << "no failure; expected " << expected;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
  for (int r = 0; r < world; ++r)
    EXPECT_FALSE(seen[r].empty()) << "rank " << r << " did not fail";
}

TEST(CpuCommunicatorTest, MismatchedShapesFailOnEveryRank) {
  expect_group_failure(
      [](Communicator& comm) {
        Tensor x = Tensor::empty({comm.rank() == 1 ? 4 : 3}, DType::kF32);
        comm.all_reduce(x);
      },
      "a float32 tensor of shape [4]");  // from rank 0 or rank 1, whichever failed first
}

TEST(CpuCommunicatorTest, AWrongOutputFailsOnEveryRank) {
  expect_group_failure(
      [](Communicator& comm) {
        const Tensor x = Tensor::empty({2, 3}, DType::kF32);
        Tensor out = Tensor::empty({comm.rank() == 2 ? 5 : 6, 3}, DType::kF32);
        comm.all_gather(x, out);
      },
      "rank 2 gives x of shape [2, 3] and out of shape [5, 3]");
  expect_group_failure(
      [](Communicator& comm) {
        const Tensor x = Tensor::empty({4, 3}, DType::kF32);  // 4 rows over 3 ranks
        Tensor out = Tensor::empty({1, 3}, DType::kF32);
        comm.reduce_scatter(x, out);
      },
      "reduce_scatter: rank 0 gives x of shape [4, 3]");
}

TEST(CpuCommunicatorTest, ARankFailingInItsOwnCodeStopsTheOthers) {
  expect_group_failure(
      [](Communicator& comm) {
        Tensor x = Tensor::empty({8}, DType::kF32);
        comm.all_reduce(x);
        if (comm.rank() == 1) fail("rank 1 cannot go on");
        comm.all_reduce(x);  // the others wait here until rank 1's failure aborts the group
        comm.all_reduce(x);
      },
      "rank 1 cannot go on");
}

// abort() on one rank of a group made directly (as the engine's ranks are): the others' waiting
// collective fails, and so does every later one.
// The host-staged group gives the CPU group's results for host tensors and, where there is a GPU,
// for tensors on it (copied to the host and back around each collective).
TEST(CpuCommunicatorTest, HostStagedGroupGivesTheSerialResults) {
  const int world = 2;
  const Shape shape = {4, 3};
  const std::vector<float> sum = serial_sum(world, shape, DType::kBF16);
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  for (const Device& device : devices) {
    SCOPED_TRACE(device.to_string());
    std::vector<std::unique_ptr<Communicator>> ranks = make_host_staged_group(world);
    std::vector<std::vector<float>> reduced(world), gathered(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        const CurrentDevice current(device);
        const Tensor x = rank_input(r, shape, DType::kBF16).to(device);
        ranks[r]->all_reduce(x);
        reduced[r] = floats(x.to(Device::cpu()));
        const Tensor all = Tensor::empty({world * shape[0], shape[1]}, DType::kBF16, device);
        ranks[r]->all_gather(rank_input(r, shape, DType::kBF16).to(device), all);
        gathered[r] = floats(all.to(Device::cpu()));
      });
    }
    for (std::thread& thread : threads)
      thread.join();
    std::vector<float> both = floats(rank_input(0, shape, DType::kBF16));
    const std::vector<float> second = floats(rank_input(1, shape, DType::kBF16));
    both.insert(both.end(), second.begin(), second.end());
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(reduced[r], sum) << "rank " << r;
      EXPECT_EQ(gathered[r], both) << "rank " << r;
    }
  }
}

TEST(CpuCommunicatorTest, AbortEndsTheGroup) {
  std::vector<std::unique_ptr<Communicator>> ranks = make_cpu_group(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 1; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Tensor x = Tensor::empty({4}, DType::kF32);
      try {
        ranks[r]->all_reduce(x);
      } catch (const Error& error) {
        errors[r] = error.what();
      }
    });
  }
  ranks[0]->abort();
  ranks[0]->abort();  // idempotent
  for (std::thread& thread : threads)
    thread.join();
  for (int r = 1; r < 3; ++r)
    EXPECT_NE(errors[r].find("aborted"), std::string::npos) << "rank " << r << ": " << errors[r];
  Tensor x = Tensor::empty({4}, DType::kF32);
  EXPECT_THROW(ranks[1]->all_reduce(x), Error);
}

TEST(CpuCommunicatorTest, ARankCallingOneCollectiveMoreFails) {
  expect_group_failure(
      [](Communicator& comm) {
        Tensor x = Tensor::empty({8}, DType::kF32);
        comm.all_reduce(x);
        if (comm.rank() == 0) comm.all_reduce(x);  // the others have finished
        if (comm.rank() != 0) fail("rank {} stops here", comm.rank());
      },
      "stops here");
  // Alone past the others, the rank sees that they finished.
  std::string error;
  try {
    run_cpu_ranks(2, [](Communicator& comm) {
      Tensor x = Tensor::empty({8}, DType::kF32);
      comm.all_reduce(x);
      if (comm.rank() == 0) comm.broadcast(x, 0);
    });
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("rank 1 is at collective 1 (all_reduce), this rank at 2"), std::string::npos)
      << error;
}

TEST(CpuCommunicatorTest, GroupSizesAreBounded) {
  EXPECT_THROW(make_cpu_group(0), Error);
  EXPECT_THROW(make_cpu_group(257), Error);
  EXPECT_EQ(make_cpu_group(256).size(), 256u);
}

}  // namespace
}  // namespace pagoda
