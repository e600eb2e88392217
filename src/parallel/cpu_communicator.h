// In-process CPU ranks: W threads of one process, one Communicator each, meeting at a barrier. The
// same model code that runs over NCCL on GPUs runs over these in CI. Every rank computes a sum in
// rank order, so all ranks hold the same bits. When a rank fails (an exception in its own code,
// or a collective it cannot take part in), the group is aborted: every rank waiting in a
// collective, and every later collective, throws Error instead of waiting forever.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace pagoda {

// The communicators of a new group of `world_size` in-process ranks (1 to 256), rank r at index
// r. They share the group, which lives as long as any of them.
std::vector<std::unique_ptr<Communicator>> make_cpu_group(int world_size);
// The same, for ranks whose tensors live on GPUs (one GPU shared by every rank, or several,
// without NCCL): each collective copies the rank's tensors to the host, runs there and copies the
// result back. It lets GPU ranks be tested on a machine with one GPU; eager steps only, since the
// copies wait for the device, which a CUDA graph cannot capture.
std::vector<std::unique_ptr<Communicator>> make_host_staged_group(int world_size);

// Runs body(communicator) for every rank of a new in-process group, each on its own thread, and
// waits for all. Rethrows the first failure, by rank, after every rank has stopped; a failing
// rank aborts the group, so the others stop at their next collective.
void run_cpu_ranks(int world_size, const std::function<void(Communicator&)>& body);

}  // namespace pagoda
