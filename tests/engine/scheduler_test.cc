#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "kv/kv_test_configs.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

KvCachePlan small_plan(int64_t num_blocks, int64_t max_model_len = 64) {
  std::vector<KvLayer> layers =
      build_kv_layers(model_of({full_layer(1, 8), sliding_layer(1, 8, 8)}), nullptr,
                      {.block_size = 4, .dtype = DType::kF32, .backend = &cpu_attention_backend()});
  return plan_kv_cache(std::move(layers),
                       {.num_blocks = num_blocks, .max_model_len = max_model_len});
}

Request request(int64_t id, int length) {
  std::vector<int32_t> tokens;
  for (int t = 0; t < length; ++t)
    tokens.push_back(static_cast<int32_t>(id * 1000 + t));
  return Request(id, std::move(tokens), {}, 0);
}

TEST(SchedulerTest, BudgetSplitsPromptsIntoChunks) {
  const KvCachePlan plan = small_plan(100);
  KvCacheManager blocks(plan);
  Scheduler scheduler({.max_num_seqs = 8, .max_num_batched_tokens = 10}, blocks);
  Request a = request(1, 7);
  Request b = request(2, 9);
  scheduler.add(&a);
  scheduler.add(&b);
  std::vector<ScheduledChunk> step = scheduler.schedule();
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[0].num_tokens, 7);
  EXPECT_EQ(step[1].num_tokens, 3);  // the budget's remainder
  scheduler.complete(step);
  EXPECT_EQ(b.num_computed, 3);
  // a decodes (one token after it is sampled); b continues its prompt.
  a.token_ids.push_back(5);
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[0].request, &a);
  EXPECT_EQ(step[0].num_tokens, 1);
  EXPECT_EQ(step[1].first, 3);
  EXPECT_EQ(step[1].num_tokens, 6);
  scheduler.complete(step);
  scheduler.remove(&a);
  scheduler.remove(&b);
  EXPECT_EQ(blocks.num_free_blocks(), 99);
}

// Prompt log-probabilities need a vocabulary-wide logits row per prompt token: requests that ask
// for them share a few such tokens per step, whatever the token budget; the others take the rest
// of the budget (in arrival order, so behind a waiting request held back by that limit).
TEST(SchedulerTest, PromptLogprobsAreChunkedByTheirOwnLimit) {
  const KvCachePlan plan = small_plan(100);
  KvCacheManager blocks(plan);
  Scheduler scheduler(
      {.max_num_seqs = 8, .max_num_batched_tokens = 40, .max_prompt_logprob_tokens = 6}, blocks);
  Request a = request(1, 10);
  Request b = request(2, 10);
  Request plain = request(3, 12);
  a.params.prompt_logprobs = 0;
  b.params.prompt_logprobs = 2;
  for (Request* r : {&a, &b, &plain})
    scheduler.add(r);
  std::vector<ScheduledChunk> step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);  // a took the step's 6; b waits, and plain behind it
  EXPECT_EQ(step[0].num_tokens, 6);
  scheduler.complete(step);
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 3u);
  EXPECT_EQ(step[0].request, &a);
  EXPECT_EQ(step[0].num_tokens, 4);  // the rest of its prompt
  EXPECT_EQ(step[1].request, &b);
  EXPECT_EQ(step[1].num_tokens, 2);  // what a left of the 6
  EXPECT_EQ(step[2].request, &plain);
  EXPECT_EQ(step[2].num_tokens, 12);
  EXPECT_THROW(Scheduler({.max_prompt_logprob_tokens = 0}, blocks), Error);
}

TEST(SchedulerTest, MaxNumSeqsKeepsTheRestWaiting) {
  const KvCachePlan plan = small_plan(100);
  KvCacheManager blocks(plan);
  Scheduler scheduler({.max_num_seqs = 2}, blocks);
  std::vector<Request> requests;
  for (int i = 0; i < 3; ++i)
    requests.push_back(request(i, 5));
  for (Request& r : requests)
    scheduler.add(&r);
  const std::vector<ScheduledChunk> step = scheduler.schedule();
  EXPECT_EQ(step.size(), 2u);
  EXPECT_EQ(scheduler.num_running(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  EXPECT_EQ(requests[1].status, RequestStatus::kRunning);
  EXPECT_EQ(requests[2].status, RequestStatus::kWaiting);
  for (Request& r : requests) {
    scheduler.remove(&r);
    EXPECT_EQ(r.status, RequestStatus::kFinished);
  }
  EXPECT_EQ(blocks.num_free_blocks(), 99);
}

TEST(SchedulerTest, PreemptsTheNewestWhenBlocksRunOut) {
  // 12 usable blocks; each request takes a full and a sliding block per 4 tokens.
  const KvCachePlan plan = small_plan(13, /*max_model_len=*/20);
  KvCacheManager blocks(plan);
  Scheduler scheduler({.enable_prefix_caching = false}, blocks);
  Request a = request(1, 8);  // 4 blocks
  Request b = request(2, 8);  // 4 blocks
  scheduler.add(&a);
  scheduler.add(&b);
  scheduler.complete(scheduler.schedule());
  EXPECT_EQ(blocks.num_free_blocks(), 4);
  // a grows to 17 tokens: 10 blocks, more than are free; b, the newest, is preempted.
  for (int t = 0; t < 9; ++t)
    a.token_ids.push_back(t);
  const std::vector<ScheduledChunk> step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].request, &a);
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  EXPECT_EQ(b.num_computed, 0);
  EXPECT_EQ(b.status, RequestStatus::kPreempted);
  EXPECT_EQ(scheduler.num_waiting(), 1);
  scheduler.complete(step);
  // Once a finishes, b is scheduled again from its first token.
  scheduler.remove(&a);
  const std::vector<ScheduledChunk> resumed = scheduler.schedule();
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].request, &b);
  EXPECT_EQ(resumed[0].first, 0);
  EXPECT_EQ(b.status, RequestStatus::kRunning);
  scheduler.complete(resumed);
  scheduler.remove(&b);
  EXPECT_EQ(blocks.num_free_blocks(), 12);
}

TEST(SchedulerTest, CountsEachPrefixLookupOnce) {
  // 16 usable blocks: a takes most of them, so b waits at the head of the queue for steps.
  const KvCachePlan plan = small_plan(17, /*max_model_len=*/32);
  KvCacheManager blocks(plan);
  Scheduler scheduler({}, blocks);
  Request a = request(1, 24);
  Request b = request(2, 16);
  scheduler.add(&a);
  scheduler.complete(scheduler.schedule());
  scheduler.add(&b);
  for (int step = 0; step < 3; ++step) {
    a.token_ids.push_back(step);
    scheduler.complete(scheduler.schedule());
    ASSERT_EQ(b.status, RequestStatus::kWaiting) << "step " << step;
  }
  scheduler.remove(&a);
  scheduler.complete(scheduler.schedule());
  EXPECT_EQ(b.status, RequestStatus::kRunning);
  // Each prompt was looked up once, when it was admitted, however often b was retried.
  EXPECT_EQ(scheduler.prefix_query_tokens(), 24 + 16);
  scheduler.remove(&b);
  EXPECT_EQ(blocks.num_free_blocks(), 16);
}

TEST(SchedulerTest, AbortAtEveryStageFreesBlocks) {
  const KvCachePlan plan = small_plan(100);
  for (int stage = 0; stage < 3; ++stage) {
    KvCacheManager blocks(plan);
    Scheduler scheduler({.max_num_batched_tokens = 4}, blocks);
    Request r = request(1, 10);
    scheduler.add(&r);
    if (stage >= 1) scheduler.complete(scheduler.schedule());  // mid-prefill
    if (stage >= 2) scheduler.complete(scheduler.schedule());
    scheduler.remove(&r);
    EXPECT_FALSE(scheduler.has_requests()) << "stage " << stage;
    EXPECT_EQ(blocks.num_free_blocks(), 99) << "stage " << stage;
  }
}

}  // namespace
}  // namespace pagoda
