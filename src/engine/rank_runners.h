// Tensor parallelism in one process: the ranks after the first, each with its model shard, its KV
// cache and its own ModelRunner, run on a thread of their own. Each step they get the engine's
// inputs (the same scheduled chunks and block tables) while the engine runs rank 0 itself; their
// collectives meet rank 0's inside the forward, and only rank 0's logits are sampled.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/model_runner.h"
#include "parallel/communicator.h"

namespace pagoda {

// One rank's part of a tensor-parallel model: its shard, its KV cache (allocated from the same
// plan as every rank's), and its communicator.
struct RankShard {
  CausalLm* model = nullptr;
  const KvCache* cache = nullptr;
  Communicator* communicator = nullptr;
};

class RankRunners {
 public:
  // A runner and a thread for each of `ranks`, over `plan`.
  RankRunners(std::span<const RankShard> ranks, const KvCachePlan& plan,
              const RunnerOptions& options);
  ~RankRunners();
  RankRunners(const RankRunners&) = delete;
  RankRunners& operator=(const RankRunners&) = delete;

  // Starts the step on every rank and returns at once. The arguments must stay valid and unchanged
  // until finish().
  void start(std::span<const ScheduledChunk> chunks, std::span<const int64_t> logits_rows,
             const KvCacheManager& blocks);
  // Waits for every rank's step. A rank that fails aborts its communicator, so the others (rank 0
  // included) fail instead of waiting for it. Rethrows the failure that caused the others, from
  // `first` (rank 0's, when it failed) and the ranks' in order: the first that is not another
  // rank's abort seen from there.
  void finish(std::exception_ptr first = nullptr);

 private:
  struct Rank;
  void work(Rank& rank);

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  // The step being run.
  std::span<const ScheduledChunk> chunks_;
  std::span<const int64_t> logits_rows_;
  const KvCacheManager* blocks_ = nullptr;
};

}  // namespace pagoda
