#include "engine/speculative_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "core/error.h"
#include "scratch_dir.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

const std::string kSource = PAGODA_SOURCE_DIR;
const std::string kKjv = kSource + "/models/kjv-gemma4";
const std::string kFixtures = kSource + "/tests/fixtures/";

// The message of the Error that parsing `json` for the target in `target_dir` raises.
std::string error_of(const std::string& json, const std::string& target_dir = kKjv) {
  try {
    parse_speculative_config(json, target_dir, load_model_config(target_dir));
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(SpeculativeConfigTest, TheEmbeddedModelFindsItsAssistantAndInfersMtp) {
  const SpeculativeConfig config =
      parse_speculative_config(R"({"num_speculative_tokens": 3})", kKjv, load_model_config(kKjv));
  EXPECT_EQ(config.method, SpeculativeMethod::kMtp);
  EXPECT_EQ(config.model_dir, kKjv + "-assistant");
  EXPECT_EQ(config.num_speculative_tokens, 3);
  EXPECT_EQ(config.drafter.architecture, "Gemma4AssistantForCausalLM");
}

TEST(SpeculativeConfigTest, ADrafterWithItsOwnLayersIsADraftModel) {
  const std::string target = kFixtures + "llama-tiny";
  const SpeculativeConfig config = parse_speculative_config(
      R"({"model": ")" + kFixtures + R"(qwen3-tiny", "num_speculative_tokens": 4})", target,
      load_model_config(target));
  EXPECT_EQ(config.method, SpeculativeMethod::kDraftModel);
  EXPECT_EQ(config.num_speculative_tokens, 4);
  EXPECT_EQ(config.kv_cache_dtype, std::nullopt);  // the target's
}

// A draft model may keep its KV in another dtype than the target's (a bf16 drafter beside an FP8
// target); an assistant keeps no KV, so naming a dtype for it is refused.
TEST(SpeculativeConfigTest, ADraftModelMayNameItsKvDtype) {
  const std::string target = kFixtures + "llama-tiny";
  const auto dtype_of = [&](const std::string& dtype) {
    return parse_speculative_config(R"({"model": ")" + kFixtures +
                                        R"(qwen3-tiny", "num_speculative_tokens": 2, )" +
                                        R"("kv_cache_dtype": )" + dtype + "}",
                                    target, load_model_config(target))
        .kv_cache_dtype;
  };
  EXPECT_EQ(dtype_of(R"("bfloat16")"), DType::kBF16);
  EXPECT_EQ(dtype_of(R"("fp8")"), DType::kF8E4M3);
  EXPECT_EQ(dtype_of(R"("auto")"), std::nullopt);
  const std::string draft = R"({"model": ")" + kFixtures + R"(qwen3-tiny", )" +
                            R"("num_speculative_tokens": 2, "kv_cache_dtype": )";
  EXPECT_NE(error_of(draft + R"("int8"})", target)
                .find("\"kv_cache_dtype\" int8: expected auto, bfloat16, float16, float32 or fp8"),
            std::string::npos);
  EXPECT_NE(error_of(draft + R"(16})", target).find("\"kv_cache_dtype\" must be a string"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 2, "kv_cache_dtype": "bfloat16"})")
                .find("keeps none of its own, so it has no KV dtype"),
            std::string::npos);
}

TEST(SpeculativeConfigTest, BadCombinationsAreRefusedWithTheirReason) {
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 0})").find("not an integer in 1..16"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 17})").find("not an integer in 1..16"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"method": "mtp"})").find("give \"num_speculative_tokens\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 2, "speed": "max"})").find("unknown field"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 2, "method": "eagle"})")
                .find("\"method\" must be \"mtp\" or \"draft_model\""),
            std::string::npos);
  EXPECT_NE(error_of(R"([1, 2])").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_spec)").find("malformed JSON"), std::string::npos);
  // The assistant is a drafter that reads the target's cache: calling it a draft model is wrong.
  EXPECT_NE(error_of(R"({"method": "draft_model", "model": ")" + kKjv +
                     R"(-assistant", "num_speculative_tokens": 2})")
                .find("is an \"mtp\" drafter: it reads the target's KV cache"),
            std::string::npos);
  // 256 tokens against the embedded model's 4096.
  EXPECT_NE(error_of(R"({"model": ")" + kFixtures + R"(llama-tiny", "num_speculative_tokens": 2})")
                .find("the vocabularies differ: the target has 4096 tokens, the drafter 256"),
            std::string::npos);
  // The fixture assistant is built for gemma4-tiny's hidden size, 64; the same target made 96 wide
  // cannot feed it.
  const std::string tiny_assistant =
      R"({"model": ")" + kFixtures + R"(gemma4-assistant-tiny", "num_speculative_tokens": 2})";
  EXPECT_EQ(error_of(tiny_assistant, kFixtures + "gemma4-tiny"), "no error");
  const testing::ScratchDir scratch("wide");
  const std::string& wide = scratch.path();
  nlohmann::json config = nlohmann::json::parse(read_file(kFixtures + "gemma4-tiny/config.json"));
  config["hidden_size"] = 96;
  std::ofstream(wide + "/config.json") << config.dump();
  EXPECT_NE(error_of(tiny_assistant, wide)
                .find("the assistant is built for a target of hidden size 64, the target's is 96"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_speculative_tokens": 2})", kFixtures + "llama-tiny")
                .find("no assistant at"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"method": "draft_model", "num_speculative_tokens": 2})").find("needs \"model\""),
      std::string::npos);
}

// inspect reads the same flag, plans the drafter with the target, and refuses what does not plan
// (an assistant beside a target without the layer kinds it reads) before anything loads.
TEST(SpeculativeConfigTest, InspectTakesTheFlag) {
  const CliRun run = run_pagoda("inspect --model " + kKjv +
                                " --speculative-config '{\"num_speculative_tokens\": 3}'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("speculative  mtp, 3 draft tokens a step"), std::string::npos) << run.out;
  const CliRun mismatched = run_pagoda(
      "inspect --model " + kFixtures + "llama-tiny --speculative-config '{\"model\": \"" +
      kFixtures + "gemma4-assistant-tiny\", \"num_speculative_tokens\": 2}'");
  EXPECT_EQ(mismatched.exit_code, 1);
  EXPECT_EQ(mismatched.err.rfind("error: ", 0), 0u) << mismatched.err;
  EXPECT_EQ(std::count(mismatched.err.begin(), mismatched.err.end(), '\n'), 1) << mismatched.err;
}

}  // namespace
}  // namespace pagoda
