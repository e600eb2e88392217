// Communicators between GPUs over NCCL. A group is bootstrapped from one NCCL id, made by rank 0
// and handed to every rank: to threads of this process (run_nccl_ranks, one thread per GPU), or,
// later, to other processes over TCP or MPI (docs/parallel.md). Collectives are queued on the
// rank's device engine stream (cuda::stream()), so they order with the model's kernels and can be
// captured in a CUDA graph. Unlike the CPU ranks, NCCL cannot check that the ranks bring matching
// tensors: each rank checks its own, and the parallel model code is tested on CPU ranks first.
// NVLink multicast (NVLS) is never asked for.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace pagoda {

// NCCL's bootstrap id (an ncclUniqueId).
struct NcclId {
  std::array<char, 128> bytes{};
};

// Whether this binary was built with NCCL (with CUDA, where the toolkit has it).
bool nccl_available_in_build();

NcclId make_nccl_id();

// Rank `rank` of `world_size` ranks on GPU `device`. Every rank of the group must call this at
// the same time (it waits for all of them). Throws Error when NCCL fails or is not built in.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int world_size, int rank,
                                                     int device);

// The communicators of a new group, rank r on GPU devices[r], for a process that then drives
// each rank from a thread of its own (the engine's rank runners): every rank's initialisation
// runs on its own thread, as they must meet, and the calling thread's current device is left as it
// was. A rank that fails to join stops the others joining. Throws Error with the first failure.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<int>& devices);

// Runs body(communicator) on a thread per GPU of `devices` (rank r on devices[r]) and waits for
// all; rethrows the first failure. A rank that fails, in its initialisation or its body, aborts
// the others' communicators, so their initialisations and collectives return with an error
// instead of waiting forever.
void run_nccl_ranks(const std::vector<int>& devices,
                    const std::function<void(Communicator&)>& body);

}  // namespace pagoda
