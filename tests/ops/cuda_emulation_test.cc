// The host emulation of CUDA threads (cuda_emulation.h) that the GPU sampler's test runs on: its
// barriers order the threads' writes before the reads after them, its warp collectives exchange
// lanes' values, a missing barrier shows as a wrong answer, and a barrier some thread never
// reaches ends the process with a message instead of hanging.
#include <gtest/gtest.h>

#include <vector>

// Last: the emulation defines the CUDA names.
#include "tests/ops/cuda_emulation.h"

namespace pagoda {
namespace {

constexpr unsigned kThreads = 128;

// Each thread stores its index + 1, then (after a barrier when `synchronized`) reads its
// neighbour's; the sums of what each block's threads read.
std::vector<int> neighbour_sums(bool synchronized, unsigned blocks, unsigned cluster) {
  std::vector<std::vector<int>> shared(blocks, std::vector<int>(kThreads));
  std::vector<int> sums(blocks);
  const auto kernel = [&] {
    std::vector<int>& mine = shared[blockIdx.x];
    mine[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
    if (synchronized) __syncthreads();
    const int seen = mine[(threadIdx.x + 1) % kThreads];
    atomicAdd(&sums[blockIdx.x], seen);
  };
  emulation::launch(kernel, blocks, kThreads, cluster);
  return sums;
}

TEST(CudaEmulationTest, BarriersOrderWritesBeforeReads) {
  const int expected = static_cast<int>(kThreads * (kThreads + 1) / 2);
  for (unsigned cluster : {1u, 2u}) {
    for (int sum : neighbour_sums(true, 4, cluster))
      EXPECT_EQ(sum, expected) << "cluster of " << cluster;
  }
}

TEST(CudaEmulationTest, AMissingBarrierGivesAWrongAnswer) {
  const int expected = static_cast<int>(kThreads * (kThreads + 1) / 2);
  for (int sum : neighbour_sums(false, 2, 1))
    EXPECT_NE(sum, expected);
}

TEST(CudaEmulationTest, WarpCollectivesAndClusterPeersSeeEveryLane) {
  // A warp's sum by butterfly shuffles, its ballot of odd lanes, and each block's total read by
  // the other block of its cluster through cluster_peer after cluster_sync.
  std::vector<int> totals(2);
  std::vector<unsigned> ballots(2 * kThreads / 32);
  std::vector<int> warp_sums(2 * kThreads / 32);
  std::vector<int> peer_totals(2);
  const auto kernel = [&] {
    int v = static_cast<int>(blockIdx.x * kThreads + threadIdx.x);
    const unsigned ballot = __ballot_sync(~0u, threadIdx.x % 2 == 1);
    for (int mask = 16; mask > 0; mask /= 2)
      v += __shfl_xor_sync(~0u, v, mask);
    const unsigned warp = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
      warp_sums[warp] = v;
      ballots[warp] = ballot;
      atomicAdd(&totals[blockIdx.x], v);
    }
    cluster_sync();
    if (threadIdx.x == 0)
      peer_totals[blockIdx.x] = *cluster_peer(&totals[blockIdx.x], 1 - cluster_rank());
  };
  emulation::launch(kernel, 2, kThreads, 2);
  int all = 0;
  for (unsigned w = 0; w < warp_sums.size(); ++w) {
    const int first = static_cast<int>(w * 32);
    EXPECT_EQ(warp_sums[w], 32 * first + 31 * 32 / 2) << "warp " << w;
    EXPECT_EQ(ballots[w], 0xaaaaaaaau) << "warp " << w;
    all += warp_sums[w];
  }
  EXPECT_EQ(totals[0] + totals[1], all);
  EXPECT_EQ(peer_totals[0], totals[1]);
  EXPECT_EQ(peer_totals[1], totals[0]);
}

TEST(CudaEmulationDeathTest, ABarrierSomeThreadsSkipIsReported) {
  const auto kernel = [] {
    if (threadIdx.x != 5) __syncthreads();
  };
  EXPECT_DEATH(emulation::launch(kernel, 1, kThreads, 1), "deadlocked");
}

}  // namespace
}  // namespace pagoda
