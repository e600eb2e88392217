// A small fixed pool of worker threads for data-parallel loops on the CPU.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(begin, end) over [0, count) split into contiguous chunks, one per thread (the caller
  // runs one). Returns when every chunk is done; the first exception thrown is rethrown. Safe from
  // several threads at once: a call that finds the pool busy with another thread's loop runs its
  // own on the calling thread.
  void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body);

  // The process-wide pool, sized to the machine's cores (PAGODA_NUM_THREADS overrides).
  static ThreadPool& global();

 private:
  void work(int index);

  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the thread whose loop the workers run
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t count_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
};

}  // namespace pagoda
