#include "engine/rank_runners.h"

namespace pagoda {

Device rank_device(const RankShard& shard) {
  return shard.cache->buffers.empty() ? Device::cpu() : shard.cache->buffers[0].device();
}

struct RankRunners::Rank {
  Rank(const RankShard& shard, const KvCachePlan& plan, const RunnerOptions& options, int64_t index)
      : index(index),
        device(rank_device(shard)),
        communicator(shard.communicator),
        context_communicator(shard.context_communicator),
        runner(*shard.model, plan, *shard.cache, options) {}

  int64_t index;
  Device device;
  Communicator* communicator;
  Communicator* context_communicator;
  ModelRunner runner;
  std::exception_ptr error;
  std::thread thread;
};

RankRunners::RankRunners(std::span<const RankShard> ranks, Communicator& own,
                         Communicator* own_context, const KvCachePlan& plan,
                         const RunnerOptions& options)
    : own_(own), own_context_(own_context) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankShard& shard = ranks[i];
    PAGODA_CHECK(shard.model != nullptr && shard.cache != nullptr && shard.communicator != nullptr,
                 "a tensor-parallel rank without its model, cache or communicator");
    RunnerOptions rank_options = options;
    // Under DCP, its place in its DCP group (consecutive ranks).
    rank_options.context_rank = static_cast<int64_t>(i + 1) % plan.context_parallel_size;
    const CurrentDevice current(rank_device(shard));  // the runner's buffers go there
    ranks_.push_back(
        std::make_unique<Rank>(shard, plan, rank_options, static_cast<int64_t>(i) + 1));
  }
  for (const std::unique_ptr<Rank>& rank : ranks_)
    rank->thread = std::thread([this, r = rank.get()] { work(*r); });
}

RankRunners::~RankRunners() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (const std::unique_ptr<Rank>& rank : ranks_)
    rank->thread.join();
}

void RankRunners::work(Rank& rank) {
  // Everything this thread runs is the rank's, on its device.
  const CurrentDevice current(rank.device);
  uint64_t seen = 0;
  while (true) {
    std::unique_lock lock(mutex_);
    start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    lock.unlock();
    try {
      (*body_)(rank.index);
    } catch (...) {
      rank.error = std::current_exception();
      rank.communicator->abort();
      if (rank.context_communicator != nullptr) rank.context_communicator->abort();
    }
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

RunnerOutput RankRunners::execute(ModelRunner& own, std::span<const ScheduledChunk> chunks,
                                  std::span<const int64_t> logits_rows,
                                  const KvCacheManager& blocks) {
  RunnerOutput output;
  run_all([&](int64_t rank) {
    ModelRunner& runner = rank == 0 ? own : ranks_[rank - 1]->runner;
    RunnerOutput out = runner.execute(chunks, logits_rows, blocks);
    if (rank == 0) output = std::move(out);
  });
  return output;
}

void RankRunners::run_all(const std::function<void(int64_t rank)>& body) {
  start(body);
  try {
    body(0);
  } catch (...) {
    own_.abort();
    if (own_context_ != nullptr) own_context_->abort();
    finish(std::current_exception());  // rethrows
  }
  finish(nullptr);
}

void RankRunners::start(const std::function<void(int64_t rank)>& body) {
  {
    std::lock_guard lock(mutex_);
    PAGODA_CHECK(pending_ == 0, "a tensor-parallel step started before the last one finished");
    body_ = &body;
    pending_ = static_cast<int>(ranks_.size());
    for (const std::unique_ptr<Rank>& rank : ranks_)
      rank->error = nullptr;
    ++generation_;
  }
  start_.notify_all();
}

void RankRunners::finish(std::exception_ptr first) {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  std::vector<std::exception_ptr> errors{first};
  for (const std::unique_ptr<Rank>& rank : ranks_)
    errors.push_back(rank->error);
  if (const std::exception_ptr cause = first_cause(errors)) std::rethrow_exception(cause);
}

}  // namespace pagoda
