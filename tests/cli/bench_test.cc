// `pagoda bench` end to end on a fixture's shapes with dummy weights.
#include "cli/bench.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_test_util.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

const std::string kFixtures = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/";

CliRun run_bench(const std::string& args) {
  return run_pagoda("bench --model " + kFixtures + "llama-tiny --load-format dummy " + args);
}

int64_t line_count(const std::string& text) {
  return std::count(text.begin(), text.end(), '\n');
}

TEST(BenchCliTest, JsonCountsStepsOfOneBatch) {
  const CliRun run = run_bench("--batch-size 2 --input-len 8 --output-len 4 --num-iters 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["batch_size"], 2);
  EXPECT_EQ(report["input_len"], 8);
  EXPECT_EQ(report["output_len"], 4);
  EXPECT_EQ(report["num_iters"], 2);
  EXPECT_EQ(report["warmup_iters"], 1);
  EXPECT_EQ(report["device"], "cpu");
  // Both 8-token prompts fit the default 8192-token budget: one prefill step samples each
  // request's first token, then O - 1 = 3 decode steps sample the rest. Two timed iterations.
  EXPECT_EQ(report["prefill_steps"], 2 * 1);
  EXPECT_EQ(report["decode_steps"], 2 * 3);
  for (const char* key :
       {"prefill_time_ms", "prefill_tokens_per_s", "decode_tokens_per_s", "end_to_end_ms"}) {
    EXPECT_GT(report[key].get<double>(), 0.0) << key;
  }
  const nlohmann::json& step = report["decode_step_ms"];
  EXPECT_GT(step["mean"].get<double>(), 0.0);
  EXPECT_GT(step["median"].get<double>(), 0.0);
  EXPECT_GE(step["p99"].get<double>(), step["median"].get<double>());
  EXPECT_GE(report["end_to_end_ms"].get<double>(), report["prefill_time_ms"].get<double>());
  // llama-tiny's config says float32; the floor is for GPU runs only.
  EXPECT_EQ(report["weight_dtype"], "float32");
  EXPECT_EQ(report["weight_bytes"].get<int64_t>(), 4 * report["weight_params"].get<int64_t>());
  EXPECT_TRUE(report["weight_streaming_floor_ms"].is_null());
  EXPECT_TRUE(report["decode_step_over_floor"].is_null());
}

// Runs the bench with `args` and --json; checks its prefill and decode step counts.
void expect_steps(const std::string& args, int prefill_steps, int decode_steps) {
  const CliRun run = run_bench(args + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["prefill_steps"], prefill_steps) << args;
  EXPECT_EQ(report["decode_steps"], decode_steps) << args;
}

TEST(BenchCliTest, ChunkedPrefillStepsAreNotDecodeSteps) {
  // A 10-token budget: step 1 runs request 0's 8 tokens and 2 of request 1's; step 2 decodes
  // request 0 beside the other 6 (mixed, so prefill); steps 3-5 decode (both, both, request 1).
  expect_steps(
      "--batch-size 2 --input-len 8 --output-len 4 --num-iters 1 --warmup-iters 0 "
      "--max-num-batched-tokens 10",
      2, 3);
}

TEST(BenchCliTest, SampledRequestsStillRunToTheirLength) {
  // EOS is ignored, so sampling changes the tokens but not the number of steps.
  expect_steps(
      "--batch-size 3 --input-len 5 --output-len 6 --num-iters 1 --warmup-iters 0 "
      "--temperature 0.9 --top-k 20 --top-p 0.9 --min-p 0.01",
      1, 5);
}

// llama-tiny's projection weights: per layer q and o 64 x 64, k and v 64 x 32, gate, up and down
// 64 x 128 (36 864), in 2 layers.
constexpr int64_t kProjectionParams = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128);

// The --json report of a small batch's bench with `flags`; null (and a test failure) where it
// fails.
nlohmann::json small_report(const std::string& flags = "") {
  const CliRun run =
      run_bench("--batch-size 2 --input-len 8 --output-len 3 --num-iters 1 --json " + flags);
  EXPECT_EQ(run.exit_code, 0) << flags << ": " << run.err;
  return run.exit_code == 0 ? nlohmann::json::parse(run.out) : nlohmann::json();
}

// Under tensor parallelism the weights reported (and the floor made from them) are one rank's:
// its half of every projection, with the embeddings, norms and lm_head whole.
TEST(BenchCliTest, TensorParallelReportsOneRanksWeights) {
  const nlohmann::json a = small_report();
  const nlohmann::json b = small_report("--tensor-parallel-size 2");
  ASSERT_FALSE(a.is_null() || b.is_null());
  EXPECT_EQ(a["tensor_parallel_size"], 1);
  EXPECT_EQ(b["tensor_parallel_size"], 2);
  EXPECT_EQ(b["decode_context_parallel_size"], 1);
  // A rank of 2 holds half of the projections, in f32.
  const int64_t half = kProjectionParams / 2;
  EXPECT_EQ(a["weight_params"].get<int64_t>() - b["weight_params"].get<int64_t>(), half);
  EXPECT_EQ(a["streamed_weight_bytes"].get<int64_t>() - b["streamed_weight_bytes"].get<int64_t>(),
            4 * half);
  EXPECT_EQ(a["decode_steps"], b["decode_steps"]);
}

// FP8 projections quantized at load and e4m3 KV pages: the report says so, and each projection
// weight streams as one byte (plus a scale a block) where f32 took four.
TEST(BenchCliTest, Fp8WeightsAndKvPages) {
  const nlohmann::json a = small_report();
  const nlohmann::json b = small_report("--quantization fp8 --kv-cache-dtype fp8");
  ASSERT_FALSE(a.is_null() || b.is_null());
  EXPECT_EQ(a["kv_cache_dtype"], "float32");  // llama-tiny's config dtype
  EXPECT_EQ(b["kv_cache_dtype"], "float8_e4m3");
  EXPECT_EQ(b["weight_dtype"], "float32 (projections float8_e4m3)");
  EXPECT_EQ(a["decode_steps"], b["decode_steps"]);
  // 3 bytes fewer a projection weight, less a few f32 block scales.
  const int64_t saved =
      a["streamed_weight_bytes"].get<int64_t>() - b["streamed_weight_bytes"].get<int64_t>();
  EXPECT_LE(saved, 3 * kProjectionParams);
  EXPECT_GE(saved, 3 * kProjectionParams - 4 * 64);
}

TEST(BenchCliTest, TableByDefault) {
  const CliRun run = run_bench("--batch-size 1 --input-len 4 --output-len 1 --num-iters 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("| metric | value |\n|---|---|\n", 0), 0u) << run.out;
  // One output token: no decode steps, so no decode latency.
  EXPECT_NE(run.out.find("| decode step mean / median / p99 | - / - / - |"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("dense-decoder estimate"), std::string::npos);
}

TEST(BenchCliTest, BadShapesAndSamplingFailWithOneLineNamingTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--batch-size 0 --input-len 8 --output-len 4", "--batch-size 0"},
      {"--batch-size 1 --input-len 0 --output-len 4", "--input-len 0"},
      {"--batch-size 1 --input-len 8 --output-len -1", "--output-len -1"},
      {"--batch-size 1 --input-len 250 --output-len 7", "longer than max_model_len 256"},
      {"--batch-size 1 --input-len 8 --output-len 4 --max-model-len 10",
       "longer than max_model_len 10"},
      // The sum passes 2^63: it wrapped to a negative length before the check.
      {"--batch-size 1 --input-len 9223372036854775807 --output-len 1",
       "--input-len 9223372036854775807 plus --output-len 1 is longer than max_model_len 256"},
      {"--batch-size 4 --input-len 8 --output-len 4 --max-num-seqs 2", "--max-num-seqs 2"},
      {"--batch-size 4 --input-len 8 --output-len 4 --max-num-batched-tokens 3",
       "--max-num-batched-tokens 3"},
      {"--batch-size 1 --input-len 8 --output-len 4 --temperature -1", "temperature is -1"},
      {"--batch-size 1 --input-len 8 --output-len 4 --top-p 0", "top_p is 0"},
  };
  for (const auto& [args, expected] : cases) {
    const CliRun run = run_bench(args);
    EXPECT_NE(run.exit_code, 0) << args;
    EXPECT_EQ(line_count(run.err), 1) << args << ": " << run.err;
    EXPECT_NE(run.err.find(expected), std::string::npos) << args << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << args;
  }
}

// With --speculative-config the report carries the acceptance counters of the timed iterations;
// a model that drafts for itself keeps every draft.
TEST(BenchCliTest, ReportsSpeculativeDecoding) {
  const CliRun run = run_bench(
      "--batch-size 2 --input-len 8 --output-len 9 --num-iters 1 --json --speculative-config "
      "'{\"model\": \"" +
      kFixtures + "llama-tiny\", \"num_speculative_tokens\": 4}'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  const nlohmann::json& spec = report["speculative"];
  EXPECT_EQ(spec["method"], "draft_model");
  EXPECT_EQ(spec["num_speculative_tokens"], 4);
  // Dummy weights from one seed: the drafter is the target. After the prefill's token, 8 more
  // per request: a round of 4 drafts and its bonus, then one of the 2 drafts max_tokens leaves.
  EXPECT_EQ(spec["rounds"], 2 * 2);
  EXPECT_EQ(spec["draft_tokens"], 2 * (4 + 2));
  EXPECT_EQ(spec["accepted_tokens"], spec["draft_tokens"]);
  EXPECT_DOUBLE_EQ(spec["acceptance_rate"].get<double>(), 1.0);
  EXPECT_EQ(spec["acceptance_per_position"].size(), 4u);
  EXPECT_EQ(report["decode_steps"], 2);
  // Drafting and verifying split each decode step's time.
  const double draft = spec["draft_ms_per_decode_step"].get<double>();
  EXPECT_GT(draft, 0.0);
  EXPECT_NEAR(draft + spec["verify_ms_per_decode_step"].get<double>(),
              report["decode_step_ms"]["mean"].get<double>(), 1e-9);
  EXPECT_TRUE(nlohmann::json::parse(run_bench("--batch-size 1 --input-len 4 --output-len 2 "
                                              "--num-iters 1 --json")
                                        .out)["speculative"]
                  .is_null());
}

}  // namespace
}  // namespace pagoda
