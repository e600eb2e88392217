// The CUDA built-ins a CTA's device code uses, emulated on the host, so that a test can run such
// code where no GPU is: a block runs as blockDim std::threads, __syncthreads() is a barrier over
// them, and each warp's shuffles and ballots exchange values through a barrier over its 32
// threads. A cluster's blocks run at once, cluster_sync() a barrier over all their threads;
// cluster_peer(p, rank) takes p to point into an array of the blocks' objects indexed by cluster
// rank (the caller's way of giving each block its shared memory). Every thread of a warp must reach
// each warp collective (full masks only), as the code under test is written to. Slow (a block's
// barriers wake a thousand threads), but exact to the code's logic and its synchronization: a
// missing barrier shows as a wrong answer or a hang.
//
// Include this before the device code, which must use only these built-ins and the C library.
#pragma once

#include <atomic>
#include <barrier>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct EmulatedIndex {
  unsigned x, y, z;
};
inline thread_local EmulatedIndex emulated_thread_index{0, 0, 0};
inline thread_local EmulatedIndex emulated_block_index{0, 0, 0};
#define threadIdx emulated_thread_index
#define blockIdx emulated_block_index
#define __device__
#define __forceinline__ inline

namespace pagoda::emulation {

// A warp collective writes the lane's slot, waits for the warp, and reads. Collectives alternate
// between two sets of slots: a lane writing a set again has passed the barrier of the collective
// in between, which the other lanes reach only once done reading that set.
struct Warp {
  std::barrier<> barrier{32};
  uint64_t slots[2][32] = {};
};
inline thread_local unsigned warp_collectives = 0;

struct Block {
  std::barrier<>* barrier = nullptr;
  Warp* warps = nullptr;
  std::barrier<>* cluster_barrier = nullptr;
  unsigned cluster_rank = 0;
  unsigned cluster_size = 1;
};
inline thread_local Block block;

inline int lane() {
  return static_cast<int>(threadIdx.x % 32);
}

// Every lane gives `v` and takes lane `source`'s.
template <typename T>
T exchange(T v, int source) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  Warp& warp = block.warps[threadIdx.x / 32];
  uint64_t* slots = warp.slots[warp_collectives++ % 2];
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  slots[lane()] = bits;
  warp.barrier.arrive_and_wait();
  const uint64_t taken = slots[source];
  T out;
  std::memcpy(&out, &taken, sizeof(T));
  return out;
}

// The warp's mask of lanes whose predicate holds.
inline unsigned ballot(bool predicate) {
  Warp& warp = block.warps[threadIdx.x / 32];
  uint64_t* slots = warp.slots[warp_collectives++ % 2];
  slots[lane()] = predicate ? 1 : 0;
  warp.barrier.arrive_and_wait();
  unsigned mask = 0;
  for (int source = 0; source < 32; ++source)
    mask |= static_cast<unsigned>(slots[source]) << source;
  return mask;
}

// Runs `kernel(args...)` as each thread of `grid` blocks of `threads`, one cluster of `cluster`
// blocks at a time (grid a multiple of it).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, unsigned grid, unsigned threads, unsigned cluster, Args... args) {
  for (unsigned first = 0; first < grid; first += cluster) {
    std::barrier<> cluster_barrier(cluster * threads);
    std::vector<std::unique_ptr<std::barrier<>>> barriers;
    std::vector<std::vector<Warp>> warps;
    for (unsigned r = 0; r < cluster; ++r) {
      barriers.push_back(std::make_unique<std::barrier<>>(threads));
      warps.emplace_back(threads / 32);
    }
    std::vector<std::thread> pool;
    pool.reserve(cluster * threads);
    for (unsigned r = 0; r < cluster; ++r) {
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, r, t] {
          block = {barriers[r].get(), warps[r].data(), &cluster_barrier, r, cluster};
          emulated_thread_index = {t, 0, 0};
          emulated_block_index = {first + r, 0, 0};
          kernel(args...);
        });
      }
    }
    for (std::thread& thread : pool)
      thread.join();
  }
}

}  // namespace pagoda::emulation

inline void __syncthreads() {
  pagoda::emulation::block.barrier->arrive_and_wait();
}
inline unsigned cluster_rank() {
  return pagoda::emulation::block.cluster_rank;
}
inline unsigned cluster_size() {
  return pagoda::emulation::block.cluster_size;
}
inline void cluster_sync() {
  pagoda::emulation::block.cluster_barrier->arrive_and_wait();
}
template <typename T>
T* cluster_peer(T* local, unsigned rank) {
  return local + (static_cast<long>(rank) - static_cast<long>(cluster_rank()));
}
template <typename T>
T __shfl_sync(unsigned, T v, int source) {
  return pagoda::emulation::exchange(v, source);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return pagoda::emulation::exchange(v, pagoda::emulation::lane() ^ mask);
}
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned delta) {
  const int lane = pagoda::emulation::lane();
  const int d = static_cast<int>(delta);
  return pagoda::emulation::exchange(v, lane >= d ? lane - d : lane);
}
inline unsigned __ballot_sync(unsigned, bool predicate) {
  return pagoda::emulation::ballot(predicate);
}
inline int atomicAdd(int* address, int v) {
  return std::atomic_ref<int>(*address).fetch_add(v);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*address).fetch_add(v);
}
inline int atomicMin(int* address, int v) {
  std::atomic_ref<int> a(*address);
  int current = a.load();
  while (v < current && !a.compare_exchange_weak(current, v)) {
  }
  return current;
}
inline int __ffs(unsigned x) {
  return x == 0 ? 0 : std::countr_zero(x) + 1;
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __clz(int x) {
  return std::countl_zero(static_cast<unsigned>(x));
}
inline int __clzll(long long x) {
  return std::countl_zero(static_cast<unsigned long long>(x));
}
// Rounding toward zero, saturating, NaN to 0 (as the GPU instruction does).
inline unsigned long long __double2ull_rz(double d) {
  if (!(d > 0.0)) return 0;
  if (d >= 18446744073709551616.0) return ~0ull;
  return static_cast<unsigned long long>(d);
}
inline unsigned __float_as_uint(float f) {
  return std::bit_cast<unsigned>(f);
}
inline float __uint_as_float(unsigned u) {
  return std::bit_cast<float>(u);
}
