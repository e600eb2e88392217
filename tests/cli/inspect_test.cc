#include "cli/inspect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cli/cli_test_util.h"
#include "scratch_dir.h"
#include "source_paths.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

using testing::example_config;

// The directory `name` in `scratch`, with config.json holding `text`.
std::string config_dir(const ScratchDir& scratch, const std::string& name,
                       const std::string& text) {
  const std::string dir = scratch.file(name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << text;
  return dir;
}

TEST(InspectCliTest, PrintsThePlanAsText) {
  const CliRun run = run_pagoda("inspect --model " + example_config("gemma-4-e2b") +
                                " --kv-cache-memory 1GiB --max-model-len 32768");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* fragment : {"Gemma4ForConditionalGeneration", "shares model.layers.13.self_attn",
                               "scaled x2 (block 16 -> 32)", "3 tensors share each block id",
                               "10922 (block 0 is the null", "total KV memory    1023.94 MiB"}) {
    EXPECT_NE(run.out.find(fragment), std::string::npos) << fragment << "\n" << run.out;
  }
}

TEST(InspectCliTest, JsonMatchesThePlan) {
  const CliRun run = run_pagoda("inspect --model " + example_config("mimo-v2-flash") +
                                " --draft-model " + example_config("mimo-v2-flash-draft-128") +
                                " --num-blocks 8000 --max-model-len 16384 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json plan = nlohmann::json::parse(run.out);
  EXPECT_EQ(plan["model"]["architecture"], "MiMoV2FlashForCausalLM");
  EXPECT_EQ(plan["draft_model"]["architecture"], "Qwen3ForCausalLM");
  EXPECT_EQ(plan["layers"].size(), 52u);
  EXPECT_EQ(plan["layers"][48]["name"], "draft.model.layers.0.self_attn");
  EXPECT_EQ(plan["layers"][0]["head_size_k"], 192);
  EXPECT_EQ(plan["layers"][0]["head_size_v"], 128);
  EXPECT_EQ(plan["layers"][1]["bytes_per_token"], 8 * 320 * 2);
  EXPECT_EQ(plan["kv_cache"]["page_bytes"], 81920);
  EXPECT_EQ(plan["kv_cache"]["num_blocks"], 8000);
  EXPECT_EQ(plan["kv_cache"]["total_bytes"],
            plan["kv_cache"]["bytes_per_block_id"].get<int64_t>() * 8000);
  bool padded = false;
  for (const auto& decision : plan["page_sizes"]) {
    if (decision["action"] == "padded") {
      padded = true;
      EXPECT_EQ(decision["after"]["page_bytes"], 81920);
      EXPECT_EQ(decision["after"]["real_page_bytes"], 65536);
      EXPECT_DOUBLE_EQ(decision["waste_fraction"].get<double>(), 0.2);
      EXPECT_EQ(decision["layers"][0], "draft.model.layers.0.self_attn");
    }
  }
  EXPECT_TRUE(padded);
}

TEST(InspectCliTest, ExampleConfigsAllPlan) {
  for (const char* args :
       {"--model llama-3-8b", "--model gemma-4-e2b", "--model gemma-4-e4b",
        "--model gemma-4-e4b --draft-model gemma-4-e4b-assistant", "--model mimo-v2-flash",
        "--model mimo-v2-flash --draft-model mimo-v2-flash-draft-128"}) {
    std::string expanded = args;
    for (size_t at = expanded.find("--"); at != std::string::npos;
         at = expanded.find("--", at + 2)) {
      const size_t name = expanded.find(' ', at) + 1;
      expanded.insert(name, std::string(PAGODA_SOURCE_DIR) + "/examples/configs/");
    }
    const CliRun run = run_pagoda("inspect " + expanded + " --json");
    EXPECT_EQ(run.exit_code, 0) << args << ": " << run.err;
    nlohmann::json parsed;
    EXPECT_NO_THROW(parsed = nlohmann::json::parse(run.out)) << args;
    EXPECT_TRUE(parsed.is_object()) << args;
  }
}

// An FP8 KV cache (--kv-cache-dtype fp8) halves every page: twice the tokens per GiB of bfloat16,
// shown per group, with the CPU backend and (in a CUDA build) the CUDA one.
TEST(InspectCliTest, Fp8KvCacheShowsItsGain) {
  const std::string model =
      "inspect --model " + example_config("llama-3-8b") + " --kv-cache-dtype fp8";
  const CliRun run = run_pagoda(model + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["dtype"], "float8_e4m3");
  for (const nlohmann::json& group : report["groups"])
    EXPECT_EQ(group["spec"]["dtype"], "float8_e4m3");
  const nlohmann::json& tp = report["tensor_parallel"];
  EXPECT_EQ(tp["kv_tokens_per_gib_per_rank"].get<int64_t>(),
            2 * tp["kv_tokens_per_gib_per_rank_at_bfloat16"].get<int64_t>());
  const CliRun text = run_pagoda(model);
  EXPECT_NE(text.out.find("(2.00x)"), std::string::npos) << text.out;
#if PAGODA_HAVE_CUDA  // the backend is registered in CUDA builds only
  const CliRun cuda = run_pagoda(model + " --attention-backend cuda");
  EXPECT_EQ(cuda.exit_code, 0) << cuda.err;
  EXPECT_NE(cuda.out.find("(2.00x)"), std::string::npos) << cuda.out;
#endif
  EXPECT_NE(run_pagoda(model + " --dtype bfloat16").exit_code, 0);  // one or the other

  // A draft model that keeps bf16 pages beside the FP8 target's, in one pool.
  const std::string fixtures = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/";
  const CliRun mixed = run_pagoda(
      "inspect --model " + fixtures + "llama-tiny --kv-cache-dtype fp8 --json " +
      "--speculative-config '{\"model\": \"" + fixtures +
      "llama3-rope-tiny\", \"num_speculative_tokens\": 2, \"kv_cache_dtype\": \"bfloat16\"}'");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  std::map<std::string, std::set<std::string>> dtypes;  // target or drafter: its pages' dtypes
  const nlohmann::json plan = nlohmann::json::parse(mixed.out);
  EXPECT_EQ(plan["speculative"]["kv_cache_dtype"], "bfloat16");
  for (const nlohmann::json& layer : plan["layers"]) {
    const nlohmann::json& group = plan["groups"][layer["group"].get<size_t>()];
    dtypes[layer["role"]].insert(group["spec"]["dtype"]);
  }
  EXPECT_EQ(dtypes["target"], std::set<std::string>{"float8_e4m3"});
  EXPECT_EQ(dtypes["drafter"], std::set<std::string>{"bfloat16"});
}

// --kv-cache-dtype-skip-layers keeps target layers out of the fp8 cache (vLLM's spelling): Gemma
// 4's sliding-window layers, and the later layers reading their KV, in bfloat16 beside e4m3 pages
// for the full-attention ones; or the layers named by index. Without an fp8 cache, or naming a
// layer that is not there or keeps no KV of its own, it is an error.
TEST(InspectCliTest, SkippedLayersKeepBf16Pages) {
  const std::string model =
      "inspect --model " + example_config("gemma-4-e4b") + " --kv-cache-dtype fp8 --json";
  const auto dtypes = [&](const std::string& skips) {
    const CliRun run = run_pagoda(model + " --kv-cache-dtype-skip-layers " + skips);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::vector<std::pair<std::string, std::string>> out;  // each layer's type and page dtype
    if (run.exit_code != 0) return out;
    const nlohmann::json plan = nlohmann::json::parse(run.out);
    for (const nlohmann::json& layer : plan["layers"]) {
      const nlohmann::json& group = plan["groups"][layer["group"].get<size_t>()];
      out.emplace_back(layer["type"], group["spec"]["dtype"]);
    }
    return out;
  };
  const auto sliding = dtypes("sliding_window");
  ASSERT_EQ(sliding.size(), 42u);
  for (const auto& [type, dtype] : sliding)
    EXPECT_EQ(dtype, type == "sliding" ? "bfloat16" : "float8_e4m3") << type;
  // The gain is counted against a cache all in bfloat16: under 2x, as the sliding layers keep
  // theirs.
  const CliRun gain = run_pagoda(model + " --kv-cache-dtype-skip-layers sliding_window");
  const nlohmann::json tp = nlohmann::json::parse(gain.out)["tensor_parallel"];
  const int64_t fp8_tokens = tp["kv_tokens_per_gib_per_rank"].get<int64_t>();
  const int64_t bf16_tokens = tp["kv_tokens_per_gib_per_rank_at_bfloat16"].get<int64_t>();
  EXPECT_GT(fp8_tokens, bf16_tokens);
  EXPECT_LT(fp8_tokens, 2 * bf16_tokens);
  const auto named = dtypes("0,5");  // a sliding and a full-attention layer
  ASSERT_EQ(named.size(), 42u);
  EXPECT_EQ(named[0].second, "bfloat16");
  EXPECT_EQ(named[5].second, "bfloat16");
  EXPECT_EQ(named[1].second, "float8_e4m3");
  EXPECT_EQ(named[11].second, "float8_e4m3");  // full attention, not named

  const CliRun bf16 = run_pagoda("inspect --model " + example_config("gemma-4-e4b") +
                                 " --kv-cache-dtype bfloat16 --kv-cache-dtype-skip-layers 0");
  EXPECT_EQ(bf16.exit_code, 1);
  EXPECT_NE(bf16.err.find("keeps layers out of an fp8 KV cache; the cache is bfloat16"),
            std::string::npos)
      << bf16.err;
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"42", "layer 42 does not exist"},
      {"30", "layer 30 (model.layers.30.self_attn) reads the KV of layer"},
      {"sliding", "--kv-cache-dtype-skip-layers sliding: expected sliding_window or a layer index"},
      {"-1", "expected sliding_window or a layer index"}};
  for (const auto& [skips, expected] : refused) {
    const CliRun run = run_pagoda(model + " --kv-cache-dtype-skip-layers " + skips);
    EXPECT_EQ(run.exit_code, 1) << skips;
    EXPECT_NE(run.err.find(expected), std::string::npos) << skips << ": " << run.err;
  }
}

TEST(InspectCliTest, BadInputIsOneLineAndNonZero) {
  struct Case {
    const char* label;
    std::string args;
    std::string expected;
  };
  const std::string llama = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 64,
      "vocab_size": 10)";
  const ScratchDir scratch("inspect");
  const Case cases[] = {
      {"missing directory", "--model /nonexistent/model", "/nonexistent/model/config.json"},
      {"malformed JSON", "--model " + config_dir(scratch, "malformed", "{\"architectures\": ["),
       "malformed JSON"},
      {"a number no double holds",
       "--model " + config_dir(scratch, "overflow", llama + R"(, "rope_theta": 1e309})"),
       "number overflow"},
      {"deep nesting",
       "--model " + config_dir(scratch, "deep",
                               llama + R"(, "rope_scaling": )" + std::string(100000, '[') +
                                   std::string(100000, ']') + "}"),
       "nested deeper than 256"},
      {"wrong type",
       "--model " + config_dir(scratch, "type", llama + R"(, "num_key_value_heads": "2"})"),
       "field 'num_key_value_heads' must be an integer"},
      {"zero heads",
       "--model " + config_dir(scratch, "zero", llama + R"(, "num_key_value_heads": 0})"),
       "field 'num_key_value_heads' is 0"},
      {"unsupported architecture",
       "--model " + config_dir(scratch, "arch", R"({"architectures": ["BertModel"]})"),
       "unsupported architecture 'BertModel'"},
      {"assistant alone", "--model " + example_config("gemma-4-e4b-assistant"),
       "only runs as a drafter"},
      {"too little memory", "--model " + example_config("llama-3-8b") + " --kv-cache-memory 1MiB",
       "raise --kv-cache-memory"},
      {"bad size", "--model " + example_config("llama-3-8b") + " --kv-cache-memory lots",
       "'lots' is not a size"},
      {"bad dtype", "--model " + example_config("llama-3-8b") + " --dtype int8",
       "unknown dtype 'int8'"},
      {"too long", "--model " + example_config("llama-3-8b") + " --max-model-len 100000",
       "max_position_embeddings (8192)"},
      {"bad backend", "--model " + example_config("llama-3-8b") + " --attention-backend flash",
       "unknown attention backend 'flash'"},
      {"zero block size", "--model " + example_config("llama-3-8b") + " --block-size 0",
       "block size is 0"},
      {"huge block count",
       "--model " + example_config("llama-3-8b") + " --num-blocks 4611686018427387904",
       "limit of a KV pool"},
  };
  for (const Case& c : cases) {
    const CliRun run = run_pagoda("inspect " + c.args);
    EXPECT_EQ(run.exit_code, 1) << c.label << ": " << run.err;
    EXPECT_NE(run.err.find(c.expected), std::string::npos) << c.label << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << c.label << ": " << run.err;
    EXPECT_TRUE(run.out.empty()) << c.label;
  }
  // Flags CLI11 rejects: missing --model, both sizes at once.
  EXPECT_NE(run_pagoda("inspect").exit_code, 0);
  EXPECT_NE(run_pagoda("inspect --model x --num-blocks 5 --kv-cache-memory 1GiB").exit_code, 0);
}

TEST(InspectCliTest, FixturesShowSharedLayersFreeAndTheDrafterPadded) {
  const std::string fixtures = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/";
  CliRun run = run_pagoda("inspect --model " + fixtures + "gemma4-tiny --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json plan = nlohmann::json::parse(run.out);
  for (int layer : {4, 5}) {
    EXPECT_EQ(plan["layers"][layer]["bytes_per_token"], 0);
    EXPECT_FALSE(plan["layers"][layer]["kv_source"].is_null());
  }
  EXPECT_GT(plan["layers"][3]["bytes_per_token"].get<int64_t>(), 0);

  // mimo-tiny with a drafter whose heads are smaller (16/16 against 24/16).
  const ScratchDir scratch("inspect");
  const std::string drafter = config_dir(scratch, "small_drafter", R"({
      "architectures": ["MiMoV2FlashForCausalLM"], "hidden_size": 48, "intermediate_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 16, "v_head_dim": 16, "layer_types": ["full_attention", "sliding_attention"],
      "sliding_window": 6, "max_position_embeddings": 256, "vocab_size": 256})");
  run =
      run_pagoda("inspect --model " + fixtures + "mimo-tiny --draft-model " + drafter + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  plan = nlohmann::json::parse(run.out);
  int padded = 0;
  for (const auto& decision : plan["page_sizes"]) {
    if (decision["action"] == "padded") {
      ++padded;
      EXPECT_EQ(decision["layers"][0].get<std::string>().rfind("draft.", 0), 0u);
      EXPECT_GT(decision["waste_fraction"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(padded, 2);  // the drafter's full and sliding pages
}

TEST(InspectReportTest, LibraryCallMatchesTheCli) {
  InspectOptions options;
  options.model_dir = example_config("gemma-4-e4b");
  options.draft_model_dir = example_config("gemma-4-e4b-assistant");
  options.cache.max_model_len = 4096;
  const InspectReport report = build_inspect_report(options);
  const nlohmann::json json = inspect_report_json(report);
  EXPECT_EQ(json["layers"][45]["kv_source"], "model.layers.23.self_attn");
  EXPECT_EQ(json["layers"][45]["bytes_per_token"], 0);
  EXPECT_EQ(json["layers"][45]["role"], "drafter");
  EXPECT_EQ(json["kv_cache"]["num_blocks"],
            json["kv_cache"]["blocks_per_max_model_len_sequence"].get<int64_t>() + 1);
  EXPECT_NE(inspect_report_text(report).find("shares model.layers.22.self_attn"),
            std::string::npos);
}

// One rank of several: half the KV heads per rank halve the KV bytes per token (until the KV heads
// are replicated), and the weights shrink by the split projections only.
TEST(InspectCliTest, TensorParallelShowsOneRank) {
  const auto json_of = [](int size) {
    const CliRun run = run_pagoda("inspect --model " + std::string(PAGODA_SOURCE_DIR) +
                                  "/bench/configs/llama-3-8b --tensor-parallel-size " +
                                  std::to_string(size) + " --json");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return nlohmann::json::parse(run.out);
  };
  const nlohmann::json one = json_of(1), two = json_of(2), sixteen = json_of(16);
  EXPECT_EQ(one["tensor_parallel"]["size"], 1);
  EXPECT_EQ(two["kv_cache"]["bytes_per_token"].get<int64_t>() * 2,
            one["kv_cache"]["bytes_per_token"].get<int64_t>());
  EXPECT_EQ(two["tensor_parallel"]["kv_tokens_per_gib_per_rank"].get<int64_t>(),
            2 * one["tensor_parallel"]["kv_tokens_per_gib_per_rank"].get<int64_t>());
  // 8 KV heads over 16 ranks: one head each, as over 8.
  EXPECT_EQ(sixteen["layers"][0]["num_kv_heads"], 1);
  // Llama-3-8B: 8.03 B parameters; on two ranks the replicated embeddings and lm_head (1.05 B)
  // stay whole.
  const int64_t whole = one["tensor_parallel"]["params_per_rank"].get<int64_t>();
  const int64_t half = two["tensor_parallel"]["params_per_rank"].get<int64_t>();
  const int64_t replicated = 2 * 128256 * 4096;
  EXPECT_NEAR(static_cast<double>(half - replicated), (whole - replicated) / 2.0, 1e6);
  const CliRun bad = run_pagoda("inspect --model " + std::string(PAGODA_SOURCE_DIR) +
                                "/bench/configs/llama-3-8b --tensor-parallel-size 3");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("do not split over 3 ranks"), std::string::npos) << bad.err;
}

// Under DCP a rank holds one in M of every sequence's tokens with all the KV heads of its group:
// tokens per GiB grow M×, the bytes a held token takes stay.
TEST(InspectCliTest, ContextParallelShowsOneRanksShare) {
  const auto json_of = [](const std::string& split) {
    const CliRun run = run_pagoda("inspect --model " + std::string(PAGODA_SOURCE_DIR) +
                                  "/bench/configs/llama-3-8b " + split + " --json");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return nlohmann::json::parse(run.out);
  };
  const nlohmann::json one = json_of(""), dcp = json_of("--decode-context-parallel-size 2"),
                       both = json_of(
                           "--tensor-parallel-size 2 --decode-context-parallel-size 2 "
                           "--dcp-kv-cache-interleave-size 8");
  const auto tokens_per_gib = [](const nlohmann::json& j) {
    return j["tensor_parallel"]["kv_tokens_per_gib_per_rank"].get<int64_t>();
  };
  EXPECT_EQ(dcp["decode_context_parallel"]["size"], 2);
  EXPECT_EQ(dcp["kv_cache"]["bytes_per_token"], one["kv_cache"]["bytes_per_token"]);
  EXPECT_EQ(tokens_per_gib(dcp), 2 * tokens_per_gib(one));
  // TP 2 with DCP 2: every KV head on each rank, half the weights, half the tokens.
  EXPECT_EQ(both["layers"][0]["num_kv_heads"], 8);
  EXPECT_EQ(both["decode_context_parallel"]["interleave"], 8);
  EXPECT_EQ(tokens_per_gib(both), 2 * tokens_per_gib(one));
  EXPECT_LT(both["tensor_parallel"]["params_per_rank"].get<int64_t>(),
            one["tensor_parallel"]["params_per_rank"].get<int64_t>());
  const CliRun text = run_pagoda("inspect --model " + std::string(PAGODA_SOURCE_DIR) +
                                 "/bench/configs/llama-3-8b --decode-context-parallel-size 2");
  EXPECT_NE(text.out.find("parallel     2 ranks (TP 1, DCP 2, interleave 1)"), std::string::npos)
      << text.out;
}

}  // namespace
}  // namespace pagoda
