// Collectives among the ranks of one parallel group (tensor or decode-context parallelism). Each
// rank holds its own Communicator and calls the group's collectives in the same order as every
// other rank, with tensors of the same shape and dtype; a collective returns once its result is in
// place for this rank. Implementations: in-process CPU ranks, threads of one process
// (parallel/cpu_communicator.h), which is how the parallel model code is tested without GPUs; NCCL
// between GPUs.
#pragma once

#include <exception>
#include <span>

#include "core/tensor.h"

namespace pagoda {

// Of the failures of a group's ranks (null where a rank did not fail), the one that caused the
// others: the first, by rank, that is not a collective failing because another rank aborted the
// group. Null when none failed.
std::exception_ptr first_cause(std::span<const std::exception_ptr> failures);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // x = the sum of every rank's x, in place. x: contiguous, f32, bf16 or f16.
  virtual void all_reduce(const Tensor& x) = 0;
  // out [world * n, ...] = every rank's x [n, ...], in rank order along dim 0.
  virtual void all_gather(const Tensor& x, const Tensor& out) = 0;
  // out [n, ...] = rows [rank * n, (rank + 1) * n) of the sum of every rank's x [world * n, ...].
  // For both, out must not overlap x.
  virtual void reduce_scatter(const Tensor& x, const Tensor& out) = 0;
  // x = root's x, in place.
  virtual void broadcast(const Tensor& x, int root) = 0;
  // Ends the group after a failure on this rank: every rank's collectives in progress and to come
  // fail instead of waiting for it. Idempotent; the group cannot be used again.
  virtual void abort() = 0;
};

}  // namespace pagoda
