#include "core/thread_pool.h"

#include <cstdlib>
#include <string>

namespace pagoda {
namespace {

// Chunk `index` of `parts` over [0, count).
std::pair<int64_t, int64_t> chunk(int64_t count, int parts, int index) {
  const int64_t base = count / parts;
  const int64_t extra = count % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

// Set while a thread runs a chunk: a nested parallel_for then runs inline instead of waiting on
// workers that are busy with the outer loop.
thread_local bool inside_parallel_for = false;

struct InsideScope {
  InsideScope() { inside_parallel_for = true; }
  ~InsideScope() { inside_parallel_for = false; }
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i)
    workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& worker : workers_)
    worker.join();
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  while (true) {
    std::unique_lock lock(mutex_);
    start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const auto* body = body_;
    const auto [begin, end] = chunk(count_, num_threads(), index);
    lock.unlock();
    std::exception_ptr error;
    try {
      const InsideScope scope;
      if (begin < end) (*body)(begin, end);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  std::unique_lock busy(busy_, std::defer_lock);
  if (workers_.empty() || count == 1 || inside_parallel_for || !busy.try_lock()) {
    body(0, count);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    count_ = count;
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr error;
  const auto [begin, end] = chunk(count, num_threads(), 0);
  try {
    const InsideScope scope;
    if (begin < end) body(begin, end);
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  if (!error) error = error_;
  body_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("PAGODA_NUM_THREADS")) {
      const int requested = std::atoi(env);
      if (requested >= 1 && requested <= 1024) return requested;
    }
    const unsigned cores = std::thread::hardware_concurrency();
    return cores == 0 ? 1 : static_cast<int>(cores);
  }());
  return pool;
}

}  // namespace pagoda
