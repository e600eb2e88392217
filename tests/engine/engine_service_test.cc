#include "engine/engine_service.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "server/service_fixtures.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

using std::chrono::milliseconds;

// Every token of a request's deltas, until its finish reason.
std::pair<std::vector<int32_t>, FinishReason> drain(RequestHandle& handle) {
  std::vector<int32_t> tokens;
  for (int polls = 0; polls < 2000; ++polls) {
    for (const RequestDelta& delta : handle.wait(milliseconds(50))) {
      for (const SampledToken& token : delta.new_tokens)
        tokens.push_back(token.token_id);
      if (delta.finish_reason != FinishReason::kNone) return {tokens, delta.finish_reason};
    }
  }
  ADD_FAILURE() << "the request never finished";
  return {tokens, FinishReason::kNone};
}

double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  EXPECT_NE(at, std::string::npos) << name;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(EngineServiceTest, ConcurrentSubmittersGetTheirOwnTokens) {
  TinyModel tiny;
  // What each request gives when run alone, through the offline API.
  std::vector<std::vector<int32_t>> expected;
  for (int32_t r = 0; r < 8; ++r) {
    const Request result =
        generate(*tiny.model, tiny.plan, tiny.memory, tiny.engine, {request(10 + r, 6 + r)})
            .front();
    std::vector<int32_t> ids;
    for (int32_t token : result.output_token_ids())
      ids.push_back(token);
    expected.push_back(ids);
  }
  EngineService service(*tiny.model, tiny.plan, tiny.memory, tiny.engine);
  std::vector<std::vector<int32_t>> got(8);
  std::vector<std::thread> clients;
  for (int32_t r = 0; r < 8; ++r) {
    clients.emplace_back([&, r] {
      auto handle = service.submit(request(10 + r, 6 + r));
      auto [tokens, reason] = drain(*handle);
      EXPECT_EQ(reason, FinishReason::kLength);
      got[r] = tokens;
    });
  }
  for (std::thread& client : clients)
    client.join();
  EXPECT_EQ(got, expected);
  const std::string metrics = service.metrics_text();
  EXPECT_EQ(metric(metrics, "pagoda:generation_tokens_total"), 6 * 8 + 28);
  EXPECT_EQ(metric(metrics, "pagoda:num_requests_running"), 0);
  EXPECT_NE(metrics.find("pagoda:time_to_first_token_seconds_count 8"), std::string::npos);
}

TEST(EngineServiceTest, AbortFreesTheRequestsBlocksAndBadRequestsThrow) {
  TinyModel tiny;
  EngineService service(*tiny.model, tiny.plan, tiny.memory, tiny.engine);
  auto handle = service.submit(request(5, 200));
  // Wait for the first tokens, then abort.
  while (handle->wait(milliseconds(50)).empty()) {
  }
  service.abort(handle);
  auto [tokens, reason] = drain(*handle);
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_LT(tokens.size(), 200u);
  service.abort(handle);  // a second abort is harmless
  // The metrics catch up at the engine's next step.
  auto ok = service.submit(request(6, 2));
  drain(*ok);
  EXPECT_EQ(metric(service.metrics_text(), "pagoda:kv_cache_usage_perc"), 0.0);
  EXPECT_THROW(service.submit({.prompt_token_ids = {999}}), Error);  // outside the vocabulary
  EXPECT_THROW(service.submit(request(1, 1000)), Error);             // past max_model_len
}

// A failed step ends its requests with the error; the engine thread goes back to sleep with
// nothing held, and later requests succeed.
TEST(EngineServiceTest, AFailedStepFailsOnlyItsRequests) {
  TinyModel tiny;
  PoisonedModel poisoned(*tiny.model);
  EngineService service(poisoned, tiny.plan, tiny.memory, tiny.engine);
  GenerationRequest poison = request(5, 4);
  poison.prompt_token_ids.push_back(255);
  auto failed = service.submit(poison);
  auto [tokens, reason] = drain(*failed);
  EXPECT_EQ(reason, FinishReason::kError);
  EXPECT_TRUE(tokens.empty());
  EXPECT_NE(failed->error().find("out of memory"), std::string::npos) << failed->error();
  EXPECT_FALSE(service.healthy());
  // The failed step is not retried, and nothing is held while the service sleeps.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(poisoned.calls.load(), 1);
  const std::string metrics = service.metrics_text();
  EXPECT_EQ(metric(metrics, "pagoda:num_requests_running"), 0);
  EXPECT_EQ(metric(metrics, "pagoda:num_requests_waiting"), 0);
  EXPECT_EQ(metric(metrics, "pagoda:kv_cache_usage_perc"), 0.0);
  auto ok = service.submit(request(6, 3));
  auto [ok_tokens, ok_reason] = drain(*ok);
  EXPECT_EQ(ok_reason, FinishReason::kLength);
  EXPECT_EQ(ok_tokens.size(), 3u);
  EXPECT_TRUE(ok->error().empty());
  EXPECT_TRUE(service.healthy());
}

// With a drafter, /metrics carries vLLM's spec_decode counters: here the model drafts for itself,
// so every draft is kept and each position's count equals the rounds.
TEST(EngineServiceTest, MetricsCountSpeculativeDecoding) {
  TinyModel tiny;
  const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny";
  SpeculativeConfig spec = parse_speculative_config(
      R"({"model": ")" + dir + R"(", "num_speculative_tokens": 2})", dir, tiny.config);
  Drafter drafter = load_drafter(spec, Device::cpu());
  tiny.plan = plan_on_cpu(tiny.config, &spec.drafter, {.block_size = 4, .num_blocks = 300});
  tiny.memory = allocate_kv_cache(tiny.plan, Device::cpu());
  EngineService service(*tiny.model, tiny.plan, tiny.memory, tiny.engine, &drafter);
  auto handle = service.submit(request(10, 7));  // 1 token from the prefill, then 2 rounds of 3
  auto [tokens, reason] = drain(*handle);
  EXPECT_EQ(tokens.size(), 7u);
  // The counters catch up at the engine's next step.
  drain(*service.submit(request(12, 1)));
  const std::string metrics = service.metrics_text();
  EXPECT_EQ(metric(metrics, "pagoda:spec_decode_num_drafts_total"), 2);
  EXPECT_EQ(metric(metrics, "pagoda:spec_decode_num_draft_tokens_total"), 4);
  EXPECT_EQ(metric(metrics, "pagoda:spec_decode_num_accepted_tokens_total"), 4);
  EXPECT_NE(metrics.find("pagoda:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 2"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace pagoda
