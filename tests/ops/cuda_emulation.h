// The CUDA built-ins a CTA's device code uses, emulated on the host, so that a test can run such
// code where no GPU is: each thread of a block runs as a fiber (its own stack, switched by
// swapcontext on one OS thread), __syncthreads() is a barrier over a block's fibers, and each
// warp's shuffles and ballots exchange values through a barrier over its 32 fibers. A cluster's
// blocks run at once, cluster_sync() a barrier over all their fibers; cluster_peer(p, rank) takes p
// to point into an array of the blocks' objects indexed by cluster rank (the caller's way of giving
// each block its shared memory). Every thread of a warp must reach each warp collective (full
// masks only), as the code under test is written to.
//
// A fiber runs until it waits at a barrier, so between two barriers the threads run one after
// another, in index order and in reverse order on alternate rounds: a read of another thread's
// write that lacks a barrier sees the old value one way or the other, and shows as a wrong answer.
// A barrier that some thread never reaches is reported, not waited on forever. Under
// ThreadSanitizer each fiber is a thread of its own whose only synchronization is the barriers, so
// such a race is reported as well.
//
// Include this before the device code, which must use only these built-ins and the C library.
#pragma once

#include <ucontext.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define PAGODA_EMULATION_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PAGODA_EMULATION_TSAN 1
#endif
#endif
#ifdef PAGODA_EMULATION_TSAN
#include <sanitizer/tsan_interface.h>
#endif

struct EmulatedIndex {
  unsigned x, y, z;
};
#define __device__
#define __forceinline__ inline

namespace pagoda::emulation {

class Barrier;
struct Warp;

struct Block {
  Barrier* barrier = nullptr;
  Warp* warps = nullptr;
  Barrier* cluster_barrier = nullptr;
  unsigned cluster_rank = 0;
  unsigned cluster_size = 1;
};

// One emulated thread: its stack, its saved registers, and what the built-ins read while it runs.
// The scheduler writes a fiber's fields before it first runs; only the fiber writes them after.
struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  EmulatedIndex thread{0, 0, 0};
  EmulatedIndex block_index{0, 0, 0};
  Block block;
  unsigned warp_collectives = 0;
  std::atomic<bool> done{false};
  void* tsan_fiber = nullptr;
};

// The fibers of one cluster's launch, resumed in turn by the thread that launched it. The fields
// the fibers share are atomics (relaxed: one thread runs them all), so that under ThreadSanitizer
// the emulation's own bookkeeping synchronizes nothing and races with nothing.
struct Scheduler {
  ucontext_t context;
  const std::function<void()>* body = nullptr;
  std::atomic<Fiber*> current{nullptr};
  std::atomic<uint64_t> progress{0};  // arrivals at barriers and fibers finished
  void* tsan_fiber = nullptr;
  // ThreadSanitizer's view: what the launch did before the fibers comes before each of them, and
  // what each did before what the launch does after; nothing else orders one fiber after another
  // but the barriers.
  [[maybe_unused]] char tsan_before = 0;
  [[maybe_unused]] char tsan_after = 0;
};
inline thread_local std::atomic<Scheduler*> scheduler{nullptr};

inline Scheduler& current_scheduler() {
  return *scheduler.load(std::memory_order_relaxed);
}

// The running fiber.
inline Fiber& fiber() {
  return *current_scheduler().current.load(std::memory_order_relaxed);
}

inline void yield() {
  Scheduler& s = current_scheduler();
#ifdef PAGODA_EMULATION_TSAN
  __tsan_switch_to_fiber(s.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
  swapcontext(&fiber().context, &s.context);
}

// A barrier over `count` fibers of one scheduler.
class Barrier {
 public:
  explicit Barrier(unsigned count) : count_(count) {}

  void arrive_and_wait() {
    constexpr auto kRelaxed = std::memory_order_relaxed;
    const uint64_t generation = generation_.load(kRelaxed);
#ifdef PAGODA_EMULATION_TSAN
    // Every arrival before every departure, of this generation only: consecutive generations
    // synchronize on different addresses, so a fiber leaving late does not acquire what others
    // did after it in the next one.
    __tsan_release(&sync_[generation % 2]);
#endif
    current_scheduler().progress.fetch_add(1, kRelaxed);
    if (arrived_.fetch_add(1, kRelaxed) + 1 == count_) {
      arrived_.store(0, kRelaxed);
      generation_.store(generation + 1, kRelaxed);
    } else {
      while (generation_.load(kRelaxed) == generation)
        yield();
    }
#ifdef PAGODA_EMULATION_TSAN
    __tsan_acquire(&sync_[generation % 2]);
#endif
  }

 private:
  const unsigned count_;
  std::atomic<unsigned> arrived_{0};
  std::atomic<uint64_t> generation_{0};
  [[maybe_unused]] char sync_[2] = {};
};

// A warp collective writes the lane's slot, waits for the warp, and reads. Collectives alternate
// between two sets of slots: a lane writing a set again has passed the barrier of the collective
// in between, which the other lanes reach only once done reading that set.
struct Warp {
  Barrier barrier{32};
  uint64_t slots[2][32] = {};
};

// Where each fiber starts. It ends by resuming the scheduler, never returning: under
// ThreadSanitizer the function's exit would be recorded as the scheduler's.
[[noreturn]] inline void fiber_main() {
  Scheduler& s = current_scheduler();
#ifdef PAGODA_EMULATION_TSAN
  __tsan_acquire(&s.tsan_before);
#endif
  (*s.body)();
  fiber().done.store(true, std::memory_order_relaxed);
  s.progress.fetch_add(1, std::memory_order_relaxed);
#ifdef PAGODA_EMULATION_TSAN
  void* const back = s.tsan_fiber;  // read before the release, as everything the fiber reads
  __tsan_release(&s.tsan_after);
  __tsan_switch_to_fiber(back, __tsan_switch_to_fiber_no_sync);
#endif
  setcontext(&s.context);
  std::abort();  // setcontext returns only on failure
}

// Gives `f` a stack and a context that starts in fiber_main. (Apart
// from the caller: getcontext returns twice as far as the compiler knows, which would make it keep
// the caller's loop variables in memory.)
[[gnu::noinline]] inline void prepare(Fiber& f) {
  constexpr size_t kStackBytes = 128 * 1024;
  f.stack.reset(new char[kStackBytes]);
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.get();
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_main, 0);
}

// Runs `body` as each thread of the cluster of blocks first .. first + cluster - 1.
inline void run_cluster(const std::function<void()>& body, unsigned first, unsigned threads,
                        unsigned cluster) {
  Barrier cluster_barrier(cluster * threads);
  std::deque<Barrier> barriers;
  std::vector<std::vector<Warp>> warps(cluster);
  for (unsigned r = 0; r < cluster; ++r) {
    barriers.emplace_back(threads);
    warps[r] = std::vector<Warp>(threads / 32);
  }
  Scheduler s;
  s.body = &body;
#ifdef PAGODA_EMULATION_TSAN
  s.tsan_fiber = __tsan_get_current_fiber();
#endif
  std::vector<Fiber> fibers(static_cast<size_t>(cluster) * threads);
  for (unsigned r = 0; r < cluster; ++r) {
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = fibers[static_cast<size_t>(r) * threads + t];
      prepare(f);
      f.thread = {t, 0, 0};
      f.block_index = {first + r, 0, 0};
      f.block = {&barriers[r], warps[r].data(), &cluster_barrier, r, cluster};
#ifdef PAGODA_EMULATION_TSAN
      f.tsan_fiber = __tsan_create_fiber(0);
#endif
    }
  }
  Scheduler* const outer = scheduler.load(std::memory_order_relaxed);
  scheduler.store(&s, std::memory_order_relaxed);
#ifdef PAGODA_EMULATION_TSAN
  __tsan_release(&s.tsan_before);
#endif
  size_t running = fibers.size();
  for (bool forward = true; running > 0; forward = !forward) {
    const uint64_t progress = s.progress.load(std::memory_order_relaxed);
    for (size_t k = 0; k < fibers.size(); ++k) {
      Fiber& f = fibers[forward ? k : fibers.size() - 1 - k];
      if (f.done.load(std::memory_order_relaxed)) continue;
      s.current.store(&f, std::memory_order_relaxed);
#ifdef PAGODA_EMULATION_TSAN
      __tsan_switch_to_fiber(f.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
      swapcontext(&s.context, &f.context);
      if (f.done.load(std::memory_order_relaxed)) --running;
    }
    if (running > 0 && s.progress.load(std::memory_order_relaxed) == progress) {
      std::fprintf(stderr,
                   "emulated CUDA threads deadlocked: %zu wait at barriers that the "
                   "other threads of their block, warp or cluster never reach\n",
                   running);
      std::abort();
    }
  }
  scheduler.store(outer, std::memory_order_relaxed);
#ifdef PAGODA_EMULATION_TSAN
  __tsan_acquire(&s.tsan_after);
  for (Fiber& f : fibers)
    __tsan_destroy_fiber(f.tsan_fiber);
#endif
}

#define threadIdx (::pagoda::emulation::fiber().thread)
#define blockIdx (::pagoda::emulation::fiber().block_index)

inline int lane() {
  return static_cast<int>(threadIdx.x % 32);
}

// Every lane gives `v` and takes lane `source`'s.
template <typename T>
T exchange(T v, int source) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  Warp& warp = fiber().block.warps[threadIdx.x / 32];
  uint64_t* slots = warp.slots[fiber().warp_collectives++ % 2];
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
  Warp& warp = fiber().block.warps[threadIdx.x / 32];
  uint64_t* slots = warp.slots[fiber().warp_collectives++ % 2];
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
  const std::function<void()> body = [&] { kernel(args...); };
  for (unsigned first = 0; first < grid; first += cluster)
    run_cluster(body, first, threads, cluster);
}

}  // namespace pagoda::emulation

inline void __syncthreads() {
  pagoda::emulation::fiber().block.barrier->arrive_and_wait();
}
inline unsigned cluster_rank() {
  return pagoda::emulation::fiber().block.cluster_rank;
}
inline unsigned cluster_size() {
  return pagoda::emulation::fiber().block.cluster_size;
}
inline void cluster_sync() {
  pagoda::emulation::fiber().block.cluster_barrier->arrive_and_wait();
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
inline unsigned atomicAdd(unsigned* address, unsigned v) {
  return std::atomic_ref<unsigned>(*address).fetch_add(v);
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
inline unsigned long long __float2ull_rz(float f) {
  return __double2ull_rz(f);
}
inline unsigned __float_as_uint(float f) {
  return std::bit_cast<unsigned>(f);
}
inline float __uint_as_float(unsigned u) {
  return std::bit_cast<float>(u);
}
