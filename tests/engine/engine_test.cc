// The engine's step loop on the committed fixtures: continuous batching, chunked prefill,
// preemption and prefix caching change no token; requests join, leave and fail between steps.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "model/fixtures.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

// The engine settings of the fixture's model, with `scheduler`.
EngineConfig engine_config(const Fixture& fixture, const SchedulerConfig& scheduler = {}) {
  return {.vocab_size = fixture.config.vocab_size,
          .max_model_len = fixture.plan.max_model_len,
          .eos_token_ids = fixture.config.eos_token_ids,
          .scheduler = scheduler};
}

// Chunked prefill under a tiny token budget, a sequence limit, preemption in a pool too small for
// the batch, and prefix-cache hits: none of them changes a greedy token. generate() itself checks
// that every block is back in the pool afterwards.
TEST(EngineTest, ContinuousBatchingChangesNoToken) {
  auto fixture = load_fixture("gemma4-tiny");  // sliding and full groups, KV-shared layers
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int32_t>> expected;
  for (const nlohmann::json& prompt : fixture->reference["prompts"]) {
    GenerationRequest request = request_for(prompt);
    request.params.prompt_logprobs.reset();
    request.params.logprobs = 0;
    requests.push_back(request);
    expected.push_back(prompt["greedy_token_ids"].get<std::vector<int32_t>>());
  }
  // A second copy of every prompt, so prefixes repeat.
  const size_t originals = requests.size();
  for (size_t r = 0; r < originals; ++r) {
    requests.push_back(requests[r]);
    expected.push_back(expected[r]);
  }
  struct Case {
    const char* label;
    SchedulerConfig scheduler;
    int64_t num_blocks;
  };
  const Case cases[] = {
      {"four sequences at a time", {.max_num_seqs = 4}, 200},
      {"chunks of 5 tokens, 2 sequences", {.max_num_seqs = 2, .max_num_batched_tokens = 5}, 200},
      {"no prefix caching", {.enable_prefix_caching = false}, 200},
      {"a pool too small for the batch", {.max_num_batched_tokens = 16}, 40},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    replan(*fixture, c.num_blocks, 64);
    GenerationStats stats;
    const std::vector<Request> results = run(*fixture, requests, c.scheduler, &stats);
    for (size_t r = 0; r < requests.size(); ++r) {
      EXPECT_EQ(token_ids(results[r]), expected[r]) << "request " << r;
    }
    if (c.num_blocks == 40) {
      EXPECT_GT(stats.preemptions, 0);
    }
    if (c.scheduler.enable_prefix_caching && c.num_blocks == 200) {
      EXPECT_GT(stats.prefix_hit_tokens, 0);  // the copies hit the cache
    } else if (!c.scheduler.enable_prefix_caching) {
      EXPECT_EQ(stats.prefix_hit_tokens, 0);
    }
  }
}

// Seeded sampling with every parameter: each request's tokens are the ones it gets alone, whatever
// the batch, the chunking, the prefix cache or preemptions do around it.
TEST(EngineTest, SeededSamplingIgnoresBatching) {
  auto fixture = load_fixture("llama-tiny");
  std::mt19937 rng(7);
  auto pick = [&](std::initializer_list<double> options) {
    return *(options.begin() + rng() % options.size());
  };
  auto random_tokens = [&](int count) {
    std::vector<int32_t> ids;
    for (int i = 0; i < count; ++i)
      ids.push_back(static_cast<int32_t>(3 + rng() % 250));
    return ids;
  };
  const std::vector<int32_t> shared = random_tokens(24);
  std::vector<GenerationRequest> requests;
  for (int r = 0; r < 30; ++r) {
    GenerationRequest request;
    if (r % 2 == 0) request.prompt_token_ids.assign(shared.begin(), shared.begin() + rng() % 24);
    const std::vector<int32_t> own = random_tokens(1 + static_cast<int>(rng() % 40));
    request.prompt_token_ids.insert(request.prompt_token_ids.end(), own.begin(), own.end());
    SamplingParams& params = request.params;
    params.temperature = pick({0.0, 0.7, 1.5});
    params.top_k = static_cast<int64_t>(pick({0, 5}));
    params.top_p = pick({1.0, 0.9});
    params.min_p = pick({0.0, 0.1});
    params.presence_penalty = pick({0.0, 0.5});
    params.frequency_penalty = pick({0.0, 0.3});
    params.repetition_penalty = pick({1.0, 1.3});
    params.max_tokens = static_cast<int64_t>(pick({1, 6, 20}));
    params.min_tokens = std::min<int64_t>(params.max_tokens, static_cast<int64_t>(pick({0, 3})));
    params.seed = rng() % 1000;
    if (r % 5 == 0) params.stop_token_ids = {static_cast<int32_t>(3 + rng() % 250)};
    requests.push_back(request);
  }
  auto tokens_of = [](const std::vector<Request>& results) {
    std::vector<std::vector<int32_t>> tokens;
    for (const Request& result : results)
      tokens.push_back(token_ids(result));
    return tokens;
  };
  const auto alone =
      tokens_of(run(*fixture, requests, {.max_num_seqs = 1, .enable_prefix_caching = false}));
  struct Case {
    const char* label;
    SchedulerConfig scheduler;
    int64_t num_blocks;
  };
  const Case cases[] = {
      {"one batch", {}, 200},
      {"chunks of 7 tokens", {.max_num_seqs = 8, .max_num_batched_tokens = 7}, 200},
      {"a pool that forces preemption", {.max_num_batched_tokens = 64}, 33},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    replan(*fixture, c.num_blocks, 128);
    GenerationStats stats;
    EXPECT_EQ(tokens_of(run(*fixture, requests, c.scheduler, &stats)), alone);
    if (c.num_blocks == 33) {
      EXPECT_GT(stats.preemptions, 0);
    }
  }
}

// The step loop: requests join and leave between steps, and deltas carry each step's tokens.
TEST(EngineTest, AddAndAbortBetweenSteps) {
  auto fixture = load_fixture("llama-tiny");
  const nlohmann::json& prompts = fixture->reference["prompts"];
  const EngineConfig config = engine_config(*fixture, {.max_num_batched_tokens = 8});
  Engine engine(*fixture->model, fixture->plan, fixture->memory, config);
  const int64_t first = engine.add_request(request_for(prompts[3]));  // 40 tokens: 5 chunks
  const int64_t doomed = engine.add_request(request_for(prompts[2]));
  std::vector<int32_t> streamed;
  for (int i = 0; i < 7; ++i) {
    for (const RequestDelta& delta : engine.step()) {
      if (delta.request_id == first) {
        for (const SampledToken& token : delta.new_tokens)
          streamed.push_back(token.token_id);
      }
    }
  }
  EXPECT_EQ(engine.status(first), RequestStatus::kRunning);
  engine.abort(doomed);
  const int64_t late = engine.add_request(request_for(prompts[1]));
  EXPECT_EQ(engine.status(late), RequestStatus::kWaiting);
  EXPECT_THROW(engine.release(late), Error);  // not finished
  bool saw_abort = false;
  while (engine.has_unfinished()) {
    for (const RequestDelta& delta : engine.step()) {
      saw_abort =
          saw_abort || (delta.request_id == doomed && delta.finish_reason == FinishReason::kAbort);
      if (delta.request_id == first) {
        for (const SampledToken& token : delta.new_tokens)
          streamed.push_back(token.token_id);
      }
    }
  }
  EXPECT_TRUE(saw_abort);
  EXPECT_EQ(engine.request(doomed).finish_reason, FinishReason::kAbort);
  EXPECT_EQ(engine.status(doomed), RequestStatus::kFinished);
  EXPECT_EQ(streamed, prompts[3]["greedy_token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(token_ids(engine.request(late)),
            prompts[1]["greedy_token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(engine.num_free_blocks(), fixture->plan.num_blocks - kNullBlocks);
  EXPECT_THROW(engine.abort(99), Error);
  engine.release(first);
  EXPECT_THROW(engine.request(first), Error);
}

// A model that fails any step whose batch holds a given token, as a CUDA out-of-memory error
// fails a long prefill.
class PoisonedModel final : public CausalLm {
 public:
  PoisonedModel(CausalLm& model, int32_t poison) : model_(model), poison_(poison) {}
  Tensor forward(const ForwardBatch& batch) override {
    if (std::find(batch.token_ids.begin(), batch.token_ids.end(), poison_) !=
        batch.token_ids.end()) {
      fail("out of memory (token {} in the batch)", poison_);
    }
    return model_.forward(batch);
  }
  Tensor compute_logits(const Tensor& hidden) override { return model_.compute_logits(hidden); }

 private:
  CausalLm& model_;
  int32_t poison_;
};

// A failed step ends the requests in it with the error and frees everything they held; requests
// outside it, and later ones, run as if nothing happened.
TEST(EngineTest, AFailedStepFailsOnlyItsRequests) {
  auto fixture = load_fixture("llama-tiny");
  const nlohmann::json& prompts = fixture->reference["prompts"];
  PoisonedModel poisoned(*fixture->model, 255);
  const EngineConfig config = engine_config(*fixture, {.max_num_seqs = 2});
  Engine engine(poisoned, fixture->plan, fixture->memory, config);
  const int64_t running = engine.add_request(request_for(prompts[0]));
  engine.step();
  GenerationRequest poison = request_for(prompts[1]);
  poison.prompt_token_ids.push_back(255);
  const int64_t failing = engine.add_request(poison);
  const int64_t waiting = engine.add_request(request_for(prompts[2]));  // past max_num_seqs
  const std::vector<RequestDelta> deltas = engine.step();
  ASSERT_EQ(deltas.size(), 2u);
  for (const RequestDelta& delta : deltas) {
    EXPECT_TRUE(delta.request_id == running || delta.request_id == failing);
    EXPECT_EQ(delta.finish_reason, FinishReason::kError);
    EXPECT_NE(delta.error.find("out of memory"), std::string::npos) << delta.error;
  }
  EXPECT_EQ(engine.request(failing).finish_reason, FinishReason::kError);
  EXPECT_EQ(engine.status(running), RequestStatus::kFinished);
  EXPECT_EQ(engine.num_running(), 0);
  EXPECT_EQ(engine.num_waiting(), 1);
  // The request that waited, and one that comes later, give their usual tokens.
  const int64_t later = engine.add_request(request_for(prompts[3]));
  while (engine.has_unfinished())
    engine.step();
  EXPECT_EQ(token_ids(engine.request(waiting)),
            prompts[2]["greedy_token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(token_ids(engine.request(later)),
            prompts[3]["greedy_token_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(engine.num_free_blocks(), fixture->plan.num_blocks - kNullBlocks);
  for (int64_t id : {running, failing, waiting, later})
    engine.release(id);
}

// fail_request() ends a request from outside a step (the server does so when a step fails
// outside the model): running or waiting, it leaves nothing behind, not even an abort delta.
TEST(EngineTest, FailRequestLeavesNothingBehind) {
  auto fixture = load_fixture("llama-tiny");
  const nlohmann::json& prompts = fixture->reference["prompts"];
  Engine engine(*fixture->model, fixture->plan, fixture->memory,
                engine_config(*fixture, {.max_num_seqs = 1}));
  const int64_t running = engine.add_request(request_for(prompts[0]));
  const int64_t waiting = engine.add_request(request_for(prompts[1]));
  engine.step();
  ASSERT_EQ(engine.status(running), RequestStatus::kRunning);
  for (const int64_t id : {running, waiting}) {
    const RequestDelta delta = engine.fail_request(id, "the step broke");
    EXPECT_EQ(delta.finish_reason, FinishReason::kError);
    EXPECT_EQ(delta.error, "the step broke");
    EXPECT_EQ(engine.status(id), RequestStatus::kFinished);
  }
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_TRUE(engine.step().empty());
  EXPECT_EQ(engine.num_free_blocks(), fixture->plan.num_blocks - kNullBlocks);
}

// generate() runs a list for a caller that wants every result: a request that a failed step ended
// is an error, not a short output.
TEST(EngineTest, GenerateReportsAFailedRequest) {
  auto fixture = load_fixture("llama-tiny");
  const nlohmann::json& prompts = fixture->reference["prompts"];
  PoisonedModel poisoned(*fixture->model, 255);
  const EngineConfig config = engine_config(*fixture);
  GenerationRequest poison = request_for(prompts[1]);
  poison.prompt_token_ids.push_back(255);
  try {
    generate(poisoned, fixture->plan, fixture->memory, config, {request_for(prompts[0]), poison});
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("out of memory"), std::string::npos) << error.what();
  }
}

// max_tokens near 2^63 would wrap prompt + max_tokens below max_model_len.
TEST(EngineTest, RefusesAMaxTokensThatWouldOverflow) {
  auto fixture = load_fixture("llama-tiny");
  const EngineConfig config = engine_config(*fixture);
  Engine engine(*fixture->model, fixture->plan, fixture->memory, config);
  GenerationRequest request = request_for(fixture->reference["prompts"][0]);
  request.params.max_tokens = std::numeric_limits<int64_t>::max() - 2;
  try {
    engine.add_request(request);
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("exceeds max_model_len"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(engine.has_unfinished());
}

// A pool the plan (and so `inspect`) says holds N sequences of max_model_len runs N of them at
// once, without preemption: the planner and admission count a sequence's blocks by one rule, in
// which a sliding group holds its window plus one step's tokens.
TEST(EngineTest, APoolForNSequencesRunsN) {
  auto fixture = load_fixture("gemma4-tiny");  // three sliding groups (window 6) and a full one
  for (const int64_t step_tokens : {8, 64}) {
    for (const int64_t sequences : {1, 2}) {
      SCOPED_TRACE(fmt::format("steps of {} tokens, {} sequences", step_tokens, sequences));
      CacheConfig cache{.dtype = DType::kF32,
                        .block_size = 4,
                        .max_model_len = 64,
                        .max_num_batched_tokens = step_tokens};
      const int64_t per_sequence =
          plan_on_cpu(fixture->config, nullptr, cache).blocks_for_sequence(64);
      cache.num_blocks = sequences * per_sequence + kNullBlocks;
      fixture->plan = plan_on_cpu(fixture->config, nullptr, cache);
      fixture->memory = allocate_kv_cache(fixture->plan, Device::cpu());
      EXPECT_DOUBLE_EQ(fixture->plan.max_concurrency(), static_cast<double>(sequences));
      std::vector<GenerationRequest> requests;
      for (int64_t r = 0; r < sequences; ++r) {
        requests.push_back(
            {.prompt_token_ids = {static_cast<int32_t>(3 + r), 7, 9, 11, 13, 5, 8, 2},
             .params = {.temperature = 0.0, .max_tokens = 56, .ignore_eos = true}});
      }
      GenerationStats stats;
      const std::vector<Request> results =
          run(*fixture, requests, {.max_num_batched_tokens = step_tokens}, &stats);
      EXPECT_EQ(stats.preemptions, 0);
      for (const Request& result : results)
        EXPECT_EQ(result.num_output_tokens(), 56);
    }
  }
}

TEST(EngineTest, ChunkedPrefillKeepsPromptLogprobs) {
  auto fixture = load_fixture("qwen3-tiny");
  const nlohmann::json& prompt = fixture->reference["prompts"][3];  // 40 tokens
  const std::vector<Request> chunked =
      run(*fixture, {request_for(prompt)}, {.max_num_batched_tokens = 7});
  const nlohmann::json& expected = prompt["prompt_logprobs"];
  ASSERT_EQ(chunked[0].prompt_logprobs.size(), expected.size());
  for (size_t i = 1; i < expected.size(); ++i) {
    EXPECT_NEAR(chunked[0].prompt_logprobs[i]->logprob, expected[i].get<double>(), 1e-4) << i;
  }
  EXPECT_EQ(token_ids(chunked[0]), prompt["greedy_token_ids"].get<std::vector<int32_t>>());
}

TEST(EngineTest, RejectsBadRequests) {
  auto fixture = load_fixture("llama-tiny");
  auto greedy = [](std::vector<int32_t> prompt, int64_t max_tokens = 4) {
    return GenerationRequest{std::move(prompt), {.temperature = 0.0, .max_tokens = max_tokens}};
  };
  GenerationRequest negative_logprobs = greedy({1});
  negative_logprobs.params.logprobs = -1;
  GenerationRequest bad_top_p = greedy({1});
  bad_top_p.params.top_p = 2.0;
  // Alternatives past the cap: a prompt's worth at the vocabulary's size would not fit memory.
  GenerationRequest many_logprobs = greedy({1});
  many_logprobs.params.logprobs = 21;
  GenerationRequest many_prompt_logprobs = greedy({1});
  many_prompt_logprobs.params.prompt_logprobs = 1000000;
  GenerationRequest many_stops = greedy({1});
  many_stops.params.stop.assign(65, "x");
  GenerationRequest long_stop = greedy({1});
  long_stop.params.stop = {std::string(1025, 'x')};
  const std::vector<std::pair<GenerationRequest, std::string>> cases = {
      {greedy({}), "empty prompt"},
      {greedy({1, 256}), "token id 256"},
      {greedy({1, -3}), "token id -3"},
      {greedy({1}, 0), "max_tokens is 0"},
      {greedy({1}, 300), "exceeds max_model_len 256"},
      {negative_logprobs, "logprobs is -1; it must be in [0, 20]"},
      {many_logprobs, "logprobs is 21; it must be in [0, 20]"},
      {many_prompt_logprobs, "prompt_logprobs is 1000000; it must be in [0, 20]"},
      {bad_top_p, "request 0: top_p is 2"},
      {many_stops, "stop has 65 strings; at most 64"},
      {long_stop, "a stop string is 1025 bytes long; at most 1024"},
  };
  for (const auto& [request, message] : cases) {
    try {
      run(*fixture, {request});
      ADD_FAILURE() << "expected an error containing " << message;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
}

TEST(EngineTest, StopsAtEndOfSequence) {
  auto fixture = load_fixture("llama-tiny");
  // Find a prompt whose greedy continuation meets an EOS id of the config (2), then stop there.
  GenerationRequest request = request_for(fixture->reference["prompts"][3]);
  const Request full = run(*fixture, {request}).front();
  fixture->config.eos_token_ids = {full.output_token_ids()[3]};
  request.params.ignore_eos = false;
  const Request stopped = run(*fixture, {request}).front();
  size_t first = 0;
  while (full.output_token_ids()[first] != full.output_token_ids()[3])
    ++first;
  EXPECT_EQ(stopped.num_output_tokens(), static_cast<int64_t>(first + 1));
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(full.finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace pagoda
