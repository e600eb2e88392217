#include "parallel/cpu_communicator.h"

#include <atomic>
#include <barrier>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "ops/cpu/ops.h"

namespace pagoda {
namespace {

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kAllGather:
      return "all_gather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "?";
}

// What a rank brings to a collective. The tensors are held (not pointed to), so a rank that has
// left leaves nothing dangling.
struct Slot {
  int64_t call = 0;  // the rank's count of collectives, this one included
  Op op = Op::kAllReduce;
  Tensor x;
  Tensor out;
  int root = 0;
};

struct Group {
  explicit Group(int world) : world(world), barrier(world), slots(world) {}

  const int world;
  std::barrier<> barrier;
  std::vector<Slot> slots;  // written by their rank before the first wait, read after it
  std::atomic<bool> aborted{false};
};

bool is_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

float element(const Tensor& t, int64_t i) {
  return cpu::load_float(t.raw_data() + i * t.element_size(), t.dtype());
}

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  ~CpuCommunicator() override { leave(); }

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world; }

  void all_reduce(const Tensor& x) override {
    collective(Op::kAllReduce, x, Tensor(), 0, [&] {
      // The sum in rank order into a copy first: the other ranks are still reading x.
      const int64_t n = x.numel();
      std::vector<float> sum(n, 0.0f);
      for (const Slot& slot : group_->slots) {
        for (int64_t i = 0; i < n; ++i)
          sum[i] += element(slot.x, i);
      }
      return [&x, sum = std::move(sum)] { store(x, 0, sum); };
    });
  }

  void all_gather(const Tensor& x, const Tensor& out) override {
    collective(Op::kAllGather, x, out, 0, [&] {
      const int64_t bytes = x.numel() * x.element_size();
      for (int r = 0; r < group_->world; ++r)
        std::memcpy(out.raw_data() + r * bytes, group_->slots[r].x.raw_data(), bytes);
      return [] {};
    });
  }

  void reduce_scatter(const Tensor& x, const Tensor& out) override {
    collective(Op::kReduceScatter, x, out, 0, [&] {
      const int64_t n = out.numel();
      std::vector<float> sum(n, 0.0f);
      for (const Slot& slot : group_->slots) {
        for (int64_t i = 0; i < n; ++i)
          sum[i] += element(slot.x, rank_ * n + i);
      }
      store(out, 0, sum);
      return [] {};
    });
  }

  void broadcast(const Tensor& x, int root) override {
    collective(Op::kBroadcast, x, Tensor(), root, [&] {
      // Only the root's x is read, and the root does not write it.
      if (rank_ != root) x.copy_from(group_->slots[root].x);
      return [] {};
    });
  }

  void abort() override { leave(); }

  // Leaves the group: the barrier stops waiting for this rank, and the group is aborted (every
  // other rank's collective in progress or to come throws) unless `finished` says this rank ended
  // normally, in which case only a rank still calling collectives sees it missing.
  void leave(bool finished = false) {
    if (left_) return;
    left_ = true;
    if (!finished) group_->aborted = true;
    group_->barrier.arrive_and_drop();
  }

 private:
  static void store(const Tensor& t, int64_t first, const std::vector<float>& values) {
    for (size_t i = 0; i < values.size(); ++i) {
      cpu::store_float(t.raw_data() + (first + static_cast<int64_t>(i)) * t.element_size(),
                       t.dtype(), values[i]);
    }
  }

  // Every rank publishes its slot and waits for the others; all check the slots alike (so they
  // fail alike); `compute` reads the slots and returns what writes this rank's result once every
  // rank is done reading. A failure aborts the group.
  template <typename Compute>
  void collective(Op op, const Tensor& x, const Tensor& out, int root, Compute&& compute) {
    if (left_ || group_->aborted) {
      leave();
      fail("{} on rank {}: the rank group was aborted by a failure on another rank", op_name(op),
           rank_);
    }
    group_->slots[rank_] = {++calls_, op, x, out, root};
    try {
      group_->barrier.arrive_and_wait();
      check(op);
      const auto write = compute();
      group_->barrier.arrive_and_wait();
      write();
      // Every rank is done reading the slots: this rank's tensors need not be held any longer.
      group_->slots[rank_].x = Tensor();
      group_->slots[rank_].out = Tensor();
    } catch (...) {
      leave();
      throw;
    }
  }

  // The same checks on every rank, over every rank's slot, so every rank fails alike. A rank
  // missing from the collective (the barrier let the others through without it) has left: after a
  // failure, which aborted the group, or after finishing.
  void check(Op op) const {
    const Slot& mine = group_->slots[rank_];
    for (int r = 0; r < group_->world; ++r) {
      const Slot& slot = group_->slots[r];
      const bool missing = slot.call != mine.call || slot.op != mine.op;
      if (missing && group_->aborted) {
        fail("{} on rank {}: the rank group was aborted by a failure on another rank", op_name(op),
             rank_);
      }
      if (missing) {
        fail("{} on rank {}: rank {} is at collective {} ({}), this rank at {}", op_name(op), rank_,
             r, slot.call, op_name(slot.op), mine.call);
      }
      if (slot.x.shape() != mine.x.shape() || slot.x.dtype() != mine.x.dtype() ||
          !slot.x.is_contiguous() || !slot.x.device().is_cpu() || !is_float(slot.x.dtype())) {
        fail(
            "{}: rank {} brings a {} tensor of shape {} (contiguous on the CPU: {}); rank {} a {} "
            "tensor of shape {}; all must be the same contiguous f32, bf16 or f16 host tensors",
            op_name(op), r, dtype_name(slot.x.dtype()), slot.x.shape(),
            slot.x.is_contiguous() && slot.x.device().is_cpu(), rank_, dtype_name(mine.x.dtype()),
            mine.x.shape());
      }
      if (slot.root != mine.root || slot.root < 0 || slot.root >= group_->world) {
        fail("broadcast: rank {} names root {}, rank {} root {}, of {} ranks", r, slot.root, rank_,
             mine.root, group_->world);
      }
      if (op == Op::kAllGather || op == Op::kReduceScatter) check_out(op, r, slot);
    }
  }

  // out of all_gather is x with world times the rows; out of reduce_scatter x with a world-th.
  void check_out(Op op, int r, const Slot& slot) const {
    const int world = group_->world;
    const Shape& shape = slot.x.shape();
    bool ok = !shape.empty() && slot.out.defined() && slot.out.is_contiguous() &&
              slot.out.device().is_cpu() && slot.out.dtype() == slot.x.dtype() &&
              slot.out.dim() == slot.x.dim();
    for (int64_t d = 0; ok && d < slot.x.dim(); ++d) {
      const int64_t want = d > 0                   ? shape[d]
                           : op == Op::kAllGather  ? shape[0] * world
                           : shape[0] % world == 0 ? shape[0] / world
                                                   : -1;
      ok = slot.out.size(d) == want;
    }
    if (!ok) {
      fail(
          "{}: rank {} gives x of shape {} and out of shape {}; out must be x's dtype with {} "
          "rows",
          op_name(op), r, shape, slot.out.defined() ? slot.out.shape() : Shape{},
          op == Op::kAllGather ? "world_size times its" : "a world_size-th of its");
    }
  }

  std::shared_ptr<Group> group_;
  int rank_;
  int64_t calls_ = 0;
  bool left_ = false;
};

// Host copies of device tensors around an in-process rank's collectives.
class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  void all_reduce(const Tensor& x) override {
    const Tensor host = staged(x);
    inner_->all_reduce(host);
    back(host, x);
  }
  void all_gather(const Tensor& x, const Tensor& out) override {
    const Tensor host_out = staged(out);
    inner_->all_gather(staged(x), host_out);
    back(host_out, out);
  }
  void reduce_scatter(const Tensor& x, const Tensor& out) override {
    const Tensor host_out = staged(out);
    inner_->reduce_scatter(staged(x), host_out);
    back(host_out, out);
  }
  void broadcast(const Tensor& x, int root) override {
    const Tensor host = staged(x);
    inner_->broadcast(host, root);
    back(host, x);
  }
  void abort() override { inner_->abort(); }

 private:
  static Tensor staged(const Tensor& t) {
    return t.defined() && !t.device().is_cpu() ? t.to(Device::cpu()) : t;
  }
  static void back(const Tensor& host, const Tensor& t) {
    if (host.raw_data() != t.raw_data()) t.copy_from(host);
  }

  std::unique_ptr<Communicator> inner_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_host_staged_group(int world_size) {
  std::vector<std::unique_ptr<Communicator>> ranks = make_cpu_group(world_size);
  for (std::unique_ptr<Communicator>& rank : ranks)
    rank = std::make_unique<HostStagedCommunicator>(std::move(rank));
  return ranks;
}

std::vector<std::unique_ptr<Communicator>> make_cpu_group(int world_size) {
  if (world_size < 1 || world_size > 256) {
    fail("a CPU rank group of {} ranks; 1 to 256 are supported", world_size);
  }
  auto group = std::make_shared<Group>(world_size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < world_size; ++r)
    ranks.push_back(std::make_unique<CpuCommunicator>(group, r));
  return ranks;
}

void run_cpu_ranks(int world_size, const std::function<void(Communicator&)>& body) {
  std::vector<std::unique_ptr<Communicator>> ranks = make_cpu_group(world_size);
  std::vector<std::exception_ptr> failures(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      auto& rank = static_cast<CpuCommunicator&>(*ranks[r]);
      try {
        body(rank);
        rank.leave(true);
      } catch (...) {
        failures[r] = std::current_exception();
        rank.leave();
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  if (const std::exception_ptr cause = first_cause(failures)) std::rethrow_exception(cause);
}

std::exception_ptr first_cause(std::span<const std::exception_ptr> failures) {
  std::exception_ptr first;
  for (const std::exception_ptr& failure : failures) {
    if (!failure) continue;
    if (!first) first = failure;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& error) {
      // Collectives of an aborted group say so (here and in the NCCL communicator).
      if (std::string_view(error.what()).find("aborted") == std::string_view::npos) return failure;
    } catch (...) {
      return failure;
    }
  }
  return first;
}

}  // namespace pagoda
