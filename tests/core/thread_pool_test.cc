#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace pagoda {
namespace {

// Each index of [0, count) visited once, in chunks that together cover the range.
void expect_each_index_once(ThreadPool& pool, int64_t count) {
  std::vector<std::atomic<int>> visits(count);
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      ++visits[i];
  });
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(visits[i].load(), 1) << "index " << i << " of " << count;
}

TEST(ThreadPoolTest, VisitsEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t count : {1, 3, 4, 5, 1000})
    expect_each_index_once(pool, count);
}

TEST(ThreadPoolTest, RethrowsTheFirstError) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t begin, int64_t) {
                                   if (begin > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  expect_each_index_once(pool, 50);  // still usable
}

TEST(ThreadPoolTest, NestedLoopsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total = 0;
  pool.parallel_for(6, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      pool.parallel_for(10, [&](int64_t b, int64_t e) { total += e - b; });
    }
  });
  EXPECT_EQ(total.load(), 60);
}

// Several threads (the ranks of an in-process group) share one pool: every loop completes with
// every index visited once, whether it got the workers or ran on its own thread.
TEST(ThreadPoolTest, LoopsFromSeveralThreadsAtOnce) {
  ThreadPool pool(4);
  std::vector<std::thread> callers;
  std::atomic<int> failures = 0;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        const int64_t count = 37 + t * 11 + round % 7;
        std::vector<std::atomic<int>> visits(count);
        pool.parallel_for(count, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i)
            ++visits[i];
        });
        for (int64_t i = 0; i < count; ++i)
          failures += visits[i].load() != 1;
      }
    });
  }
  for (std::thread& caller : callers)
    caller.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace pagoda
