#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
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
  NcclCommunicator(const NcclId& id, int world_size, int rank, int device)
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
    PAGODA_NCCL_CHECK(ncclCommInitRank(&comm_, world_size, unique, rank));
  }
  ~NcclCommunicator() override {
    if (!aborted_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  void all_reduce(const Tensor& x) override {
    check(x, "all_reduce");
    PAGODA_NCCL_CHECK(ncclAllReduce(x.raw_data(), x.raw_data(), x.numel(), nccl_type(x.dtype()),
                                    ncclSum, comm_, cuda::stream()));
  }

  void all_gather(const Tensor& x, const Tensor& out) override {
    check(x, "all_gather");
    check(out, "all_gather");
    if (out.dtype() != x.dtype() || out.numel() != x.numel() * world_) {
      fail("all_gather: out of shape {} for x of shape {} over {} ranks", out.shape(), x.shape(),
           world_);
    }
    PAGODA_NCCL_CHECK(ncclAllGather(x.raw_data(), out.raw_data(), x.numel(), nccl_type(x.dtype()),
                                    comm_, cuda::stream()));
  }

  void reduce_scatter(const Tensor& x, const Tensor& out) override {
    check(x, "reduce_scatter");
    check(out, "reduce_scatter");
    if (out.dtype() != x.dtype() || out.numel() * world_ != x.numel()) {
      fail("reduce_scatter: out of shape {} for x of shape {} over {} ranks", out.shape(),
           x.shape(), world_);
    }
    PAGODA_NCCL_CHECK(ncclReduceScatter(x.raw_data(), out.raw_data(), out.numel(),
                                        nccl_type(x.dtype()), ncclSum, comm_, cuda::stream()));
  }

  void broadcast(const Tensor& x, int root) override {
    check(x, "broadcast");
    if (root < 0 || root >= world_) fail("broadcast from rank {} of {}", root, world_);
    PAGODA_NCCL_CHECK(ncclBroadcast(x.raw_data(), x.raw_data(), x.numel(), nccl_type(x.dtype()),
                                    root, comm_, cuda::stream()));
  }

  // Ends this rank's collectives, those in progress on other threads too, with an error; NCCL
  // then fails the other ranks' collectives with this one. Idempotent.
  void abort() override {
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

 private:
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
  std::vector<std::exception_ptr> failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ranks[r] = std::make_unique<NcclCommunicator>(id, world, r, devices[r]);
      } catch (...) {
        failures[r] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
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
  bool failed = false;
  std::vector<std::exception_ptr> failures(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        PAGODA_CUDA_CHECK(cudaSetDevice(devices[r]));
        auto rank = std::make_unique<NcclCommunicator>(id, world, r, devices[r]);
        NcclCommunicator& comm = *rank;
        {
          const std::lock_guard lock(mutex);
          ranks[r] = std::move(rank);
          if (failed) comm.abort();
        }
        body(comm);
        PAGODA_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
      } catch (...) {
        failures[r] = std::current_exception();
        // The others' collectives in progress end with an error instead of waiting.
        const std::lock_guard lock(mutex);
        failed = true;
        for (auto& rank : ranks) {
          if (rank) rank->abort();
        }
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace pagoda
