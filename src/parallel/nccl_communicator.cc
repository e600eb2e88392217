#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "core/cuda/context.h"
#include "core/error.h"

namespace pagoda {
namespace {

#define PAGODA_NCCL_CHECK(call)                                                   \
  do {                                                                            \
    const ncclResult_t pagoda_nccl_result = (call);                               \
    if (pagoda_nccl_result != ncclSuccess) {                                      \
      fail("NCCL: {} failed: {}", #call, ncclGetErrorString(pagoda_nccl_result)); \
    }                                                                             \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    default:
      fail("NCCL collectives take f32, bf16 or f16 tensors; got {}", dtype_name(dtype));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  // Joins the group. The communicator is non-blocking, so that initialisation can stop when
  // `give_up` (where given) turns true: another rank of the group failed before joining, and this
  // one would otherwise wait for it forever.
  NcclCommunicator(const NcclId& id, int world_size, int rank, int device,
                   const std::atomic<bool>* give_up = nullptr)
      : world_(world_size), rank_(rank), device_(device) {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      fail("NCCL rank {} of {} ranks", rank, world_size);
    }
    // Never NVLink multicast: it can take a shared host's GPUs out of service.
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    PAGODA_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId unique;
    static_assert(sizeof(unique.internal) == sizeof(id.bytes));
    std::memcpy(unique.internal, id.bytes.data(), sizeof(unique.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, world_size, unique, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      fail("NCCL: initialisation of rank {} of {} failed: {}", rank, world_size,
           ncclGetErrorString(started));
    }
    try {
      settle(started, "ncclCommInitRankConfig", give_up);
    } catch (...) {
      abort();
      throw;
    }
  }
  ~NcclCommunicator() override {
    if (aborted_) return;
    // Finalize's host-side work may still be in progress on a non-blocking communicator.
    ncclResult_t state = ncclCommFinalize(comm_);
    while (state == ncclInProgress) {
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void all_reduce(const Tensor& x) override {
    check(x, "all_reduce");
    settle(ncclAllReduce(x.raw_data(), x.raw_data(), x.numel(), nccl_type(x.dtype()), ncclSum,
                         comm_, cuda::stream()),
           "ncclAllReduce");
  }

  void all_gather(const Tensor& x, const Tensor& out) override {
    check(x, "all_gather");
    check(out, "all_gather");
    if (out.dtype() != x.dtype() || out.numel() != x.numel() * world_) {
      fail("all_gather: out of shape {} for x of shape {} over {} ranks", out.shape(), x.shape(),
           world_);
    }
    settle(ncclAllGather(x.raw_data(), out.raw_data(), x.numel(), nccl_type(x.dtype()), comm_,
                         cuda::stream()),
           "ncclAllGather");
  }

  void reduce_scatter(const Tensor& x, const Tensor& out) override {
    check(x, "reduce_scatter");
    check(out, "reduce_scatter");
    if (out.dtype() != x.dtype() || out.numel() * world_ != x.numel()) {
      fail("reduce_scatter: out of shape {} for x of shape {} over {} ranks", out.shape(),
           x.shape(), world_);
    }
    settle(ncclReduceScatter(x.raw_data(), out.raw_data(), out.numel(), nccl_type(x.dtype()),
                             ncclSum, comm_, cuda::stream()),
           "ncclReduceScatter");
  }

  void broadcast(const Tensor& x, int root) override {
    check(x, "broadcast");
    if (root < 0 || root >= world_) fail("broadcast from rank {} of {}", root, world_);
    settle(ncclBroadcast(x.raw_data(), x.raw_data(), x.numel(), nccl_type(x.dtype()), root, comm_,
                         cuda::stream()),
           "ncclBroadcast");
  }

  // Ends this rank's collectives, those in progress on other threads too, with an error; NCCL
  // then fails the other ranks' collectives with this one. Idempotent.
  void abort() override {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
  // Waits out a call's host-side work, which a non-blocking communicator may leave in progress,
  // and fails on its error; or aborts the wait when `give_up` turns true, or this communicator is
  // aborted from another thread.
  void settle(ncclResult_t state, const char* call, const std::atomic<bool>* give_up = nullptr) {
    while (state == ncclInProgress) {
      if (aborted_) fail("{} on rank {}: the NCCL communicator was aborted", call, rank_);
      if (give_up != nullptr && *give_up) {
        fail("NCCL: rank {} of {} stopped joining its group: another rank failed", rank_, world_);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      const ncclResult_t polled = ncclCommGetAsyncError(comm_, &state);
      if (polled != ncclSuccess) state = polled;
    }
    if (state != ncclSuccess) {
      fail("NCCL: {} failed on rank {}: {}", call, rank_, ncclGetErrorString(state));
    }
  }

  void check(const Tensor& t, const char* op) const {
    if (aborted_) fail("{} on rank {}: the NCCL communicator was aborted", op, rank_);
    if (t.device() != Device::cuda(device_) || !t.is_contiguous()) {
      fail("{} on rank {}: needs a contiguous tensor on cuda:{}; got one on {}", op, rank_, device_,
           t.device().to_string());
    }
    nccl_type(t.dtype());
  }

  int world_;
  int rank_;
  int device_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
};

// The ranks' failures, kept on their threads. `any` stops the other ranks' initialisation; the
// first failure in time is rethrown, as the others may only report that they stopped for it.
struct RankFailures {
  explicit RankFailures(int world) : by_rank(world) {}

  // Called in rank r's catch block.
  void record(int r) {
    by_rank[r] = std::current_exception();
    int none = -1;
    first.compare_exchange_strong(none, r);
    any = true;
  }
  void rethrow_first() const {
    if (first >= 0) std::rethrow_exception(by_rank[first]);
  }

  std::vector<std::exception_ptr> by_rank;
  std::atomic<bool> any{false};
  std::atomic<int> first{-1};
};

}  // namespace

bool nccl_available_in_build() {
  return true;
}

NcclId make_nccl_id() {
  ncclUniqueId unique;
  PAGODA_NCCL_CHECK(ncclGetUniqueId(&unique));
  NcclId id;
  std::memcpy(id.bytes.data(), unique.internal, sizeof(unique.internal));
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int world_size, int rank,
                                                     int device) {
  return std::make_unique<NcclCommunicator>(id, world_size, rank, device);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices) {
  const int world = static_cast<int>(devices.size());
  if (world < 1) fail("an NCCL group needs at least one GPU");
  const NcclId id = make_nccl_id();
  std::vector<std::unique_ptr<Communicator>> ranks(world);
  RankFailures failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ranks[r] = std::make_unique<NcclCommunicator>(id, world, r, devices[r], &failures.any);
      } catch (...) {
        failures.record(r);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  failures.rethrow_first();
  return ranks;
}

void run_nccl_ranks(const std::vector<int>& devices,
                    const std::function<void(Communicator&)>& body) {
  const int world = static_cast<int>(devices.size());
  if (world < 1) fail("run_nccl_ranks needs at least one GPU");
  const NcclId id = make_nccl_id();
  // Owned here, destroyed after every thread has stopped; the mutex orders a rank's arrival with
  // another rank's abort of all of them.
  std::vector<std::unique_ptr<NcclCommunicator>> ranks(world);
  std::mutex mutex;
  RankFailures failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        PAGODA_CUDA_CHECK(cudaSetDevice(devices[r]));
        auto rank = std::make_unique<NcclCommunicator>(id, world, r, devices[r], &failures.any);
        NcclCommunicator& comm = *rank;
        {
          const std::lock_guard lock(mutex);
          ranks[r] = std::move(rank);
          if (failures.any) comm.abort();
        }
        body(comm);
        PAGODA_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
      } catch (...) {
        // The others' initialisations and collectives in progress end with an error instead of
        // waiting.
        const std::lock_guard lock(mutex);
        failures.record(r);
        for (auto& rank : ranks) {
          if (rank) rank->abort();
        }
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  failures.rethrow_first();
}

}  // namespace pagoda
