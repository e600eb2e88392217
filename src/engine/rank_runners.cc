#include "engine/rank_runners.h"

namespace pagoda {

struct RankRunners::Rank {
  Rank(const RankShard& shard, const KvCachePlan& plan, const RunnerOptions& options)
      : communicator(shard.communicator), runner(*shard.model, plan, *shard.cache, options) {}

  Communicator* communicator;
  ModelRunner runner;
  std::exception_ptr error;
  std::thread thread;
};

RankRunners::RankRunners(std::span<const RankShard> ranks, Communicator& own,
                         const KvCachePlan& plan, const RunnerOptions& options)
    : own_(own) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankShard& shard = ranks[i];
    PAGODA_CHECK(shard.model != nullptr && shard.cache != nullptr && shard.communicator != nullptr,
                 "a tensor-parallel rank without its model, cache or communicator");
    RunnerOptions rank_options = options;
    if (plan.context_parallel_size > 1) rank_options.context_rank = static_cast<int64_t>(i) + 1;
    ranks_.push_back(std::make_unique<Rank>(shard, plan, rank_options));
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
  uint64_t seen = 0;
  while (true) {
    std::unique_lock lock(mutex_);
    start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    lock.unlock();
    try {
      rank.runner.execute(chunks_, logits_rows_, *blocks_);
    } catch (...) {
      rank.error = std::current_exception();
      rank.communicator->abort();
    }
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

RunnerOutput RankRunners::execute(ModelRunner& own, std::span<const ScheduledChunk> chunks,
                                  std::span<const int64_t> logits_rows,
                                  const KvCacheManager& blocks) {
  start(chunks, logits_rows, blocks);
  RunnerOutput output;
  try {
    output = own.execute(chunks, logits_rows, blocks);
  } catch (...) {
    own_.abort();
    finish(std::current_exception());  // rethrows
  }
  finish(nullptr);
  return output;
}

void RankRunners::start(std::span<const ScheduledChunk> chunks,
                        std::span<const int64_t> logits_rows, const KvCacheManager& blocks) {
  {
    std::lock_guard lock(mutex_);
    PAGODA_CHECK(pending_ == 0, "a tensor-parallel step started before the last one finished");
    chunks_ = chunks;
    logits_rows_ = logits_rows;
    blocks_ = &blocks;
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
