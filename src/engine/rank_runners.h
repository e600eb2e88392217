// Tensor parallelism in one process: the ranks after the first, each with its model shard, its KV
// cache and its own ModelRunner, run on a thread of their own (on a GPU, with the rank's device
// current). Each step they get the engine's
// inputs (the same scheduled chunks and block tables) while the engine runs rank 0 itself; their
// collectives meet rank 0's inside the forward, and only rank 0's logits are sampled. A drafter's
// forwards run on every rank the same way (run_all), between which rank 0 alone updates the
// requests.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "parallel/communicator.h"

namespace pagoda {

struct Drafter;

// One rank's part of a tensor-parallel model: its shard, its KV cache (allocated from the same
// plan as every rank's), its communicator, and with speculative decoding its drafter's shard.
struct RankShard {
  CausalLm* model = nullptr;
  const KvCache* cache = nullptr;
  Communicator* communicator = nullptr;
  // Its DCP group's, when DCP groups are smaller than the group of all ranks.
  Communicator* context_communicator = nullptr;
  Drafter* drafter = nullptr;
};

// The device a rank runs on: its KV cache's.
Device rank_device(const RankShard& shard);

class RankRunners {
 public:
  // A runner and a thread for each of `ranks` (ranks 1, 2, ...), over `plan`; `own` is the
  // communicator of the caller's rank 0 (and `own_context` its DCP group's, or null). Under decode
  // context parallelism rank r is rank r mod M of its DCP group.
  RankRunners(std::span<const RankShard> ranks, Communicator& own, Communicator* own_context,
              const KvCachePlan& plan, const RunnerOptions& options);
  ~RankRunners();
  RankRunners(const RankRunners&) = delete;
  RankRunners& operator=(const RankRunners&) = delete;

  // One step on every rank: the others on their threads, rank 0 through `own` on the caller's.
  // Returns rank 0's output. A rank that fails aborts its communicator, so the others fail instead
  // of waiting for it; rethrows the failure that caused the others (the first, rank 0's before
  // the others', that is not another rank's abort seen from there).
  RunnerOutput execute(ModelRunner& own, std::span<const ScheduledChunk> chunks,
                       std::span<const int64_t> logits_rows, const KvCacheManager& blocks);
  // Runs body(r) for every rank r at once: rank 0 on the caller's thread, the others on theirs.
  // Failures are handled as execute() handles them.
  void run_all(const std::function<void(int64_t rank)>& body);
  // Ranks in all, the caller's included.
  int64_t size() const { return static_cast<int64_t>(ranks_.size()) + 1; }

 private:
  struct Rank;
  void work(Rank& rank);
  // Starts `body` on the other ranks; finish() waits for them and rethrows the cause among
  // `first` (rank 0's failure) and theirs.
  void start(const std::function<void(int64_t rank)>& body);
  void finish(std::exception_ptr first);

  Communicator& own_;
  Communicator* own_context_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  const std::function<void(int64_t rank)>* body_ = nullptr;  // what the ranks are running
};

}  // namespace pagoda
