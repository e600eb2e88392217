// `pagoda generate` end to end on a fixture checkpoint.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_test_util.h"
#include "scratch_dir.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

CliRun run_generate(const std::string& args) {
  return run_pagoda("generate --model " + std::string(PAGODA_SOURCE_DIR) +
                    "/tests/fixtures/llama-tiny " + args);
}

nlohmann::json reference_prompt(int index) {
  std::ifstream file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny/reference.json");
  return nlohmann::json::parse(file)["prompts"][index];
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids)
    text += (text.empty() ? "" : ",") + std::to_string(id);
  return text;
}

std::vector<int32_t> bytes_of(const std::string& text) {
  return std::vector<int32_t>(reinterpret_cast<const uint8_t*>(text.data()),
                              reinterpret_cast<const uint8_t*>(text.data()) + text.size());
}

// The pool `inspect` says holds one sequence runs one: both count blocks by one rule.
TEST(GenerateCliTest, RunsTheSequenceInspectSaysThePoolHolds) {
  const std::string model = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/gemma4-tiny";
  for (const char* budget : {"8", "8192"}) {
    SCOPED_TRACE(budget);
    const std::string cache =
        std::string(" --block-size 4 --max-model-len 64") + " --max-num-batched-tokens " + budget;
    const CliRun inspect = run_pagoda("inspect --model " + model + cache + " --json");
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    const nlohmann::json kv = nlohmann::json::parse(inspect.out)["kv_cache"];
    const int64_t num_blocks = kv["num_blocks"].get<int64_t>();
    EXPECT_EQ(kv["blocks_per_max_model_len_sequence"].get<int64_t>(), num_blocks - 1);
    const CliRun run = run_pagoda("generate --model " + model + cache + " --num-blocks " +
                                  std::to_string(num_blocks) +
                                  " --prompt-ids 3,7,9,11 --max-tokens 60 --ignore-eos --stats");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_NE(run.err.find("preemptions         0"), std::string::npos) << run.err;
  }
}

TEST(GenerateCliTest, JsonPerRequestInBatchOrder) {
  const nlohmann::json first = reference_prompt(1);
  const nlohmann::json second = reference_prompt(2);
  const CliRun run =
      run_generate("--prompt-ids " + ids_text(first["prompt_token_ids"]) + " --prompt-ids " +
                   ids_text(second["prompt_token_ids"]) +
                   " --max-tokens 6 --logprobs 2 --prompt-logprobs 1 --ignore-eos --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::istringstream lines(run.out);
  std::string line;
  for (const nlohmann::json* expected : {&first, &second}) {
    ASSERT_TRUE(std::getline(lines, line));
    const nlohmann::json result = nlohmann::json::parse(line);
    EXPECT_EQ(result["prompt_token_ids"], (*expected)["prompt_token_ids"]);
    const auto greedy = (*expected)["greedy_token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(result["token_ids"].get<std::vector<int32_t>>(),
              std::vector<int32_t>(greedy.begin(), greedy.begin() + 6));
    EXPECT_EQ(result["logprobs"].size(), 6u);
    EXPECT_EQ(result["logprobs"][0]["top_logprobs"].size(), 2u);
    EXPECT_TRUE(result["prompt_logprobs"][0].is_null());
    EXPECT_NEAR(result["prompt_logprobs"][1]["logprob"].get<double>(),
                (*expected)["prompt_logprobs"][1].get<double>(), 1e-4);
    EXPECT_EQ(result["finish_reason"], "length");
  }
  EXPECT_FALSE(std::getline(lines, line));
}

TEST(GenerateCliTest, PromptsFile) {
  const ScratchDir scratch("prompts");
  const std::string path = scratch.file("prompts");
  std::ofstream(path) << "[1, 2, 3]\n\n{\"prompt_token_ids\": [4, 5]}\n"
                      << "{\"prompt\": \"ab\"}\n"
                      << "{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}]}\n";
  const CliRun run =
      run_generate("--prompts-file " + path + " --tokenizer " + std::string(PAGODA_SOURCE_DIR) +
                   "/tests/fixtures/byte-tokenizer --max-tokens 2 --ignore-eos --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::istringstream lines(run.out);
  std::string line;
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{1, 2, 3}, {4, 5}, bytes_of("ab"), bytes_of("<user>c\n<assistant>")}) {
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_EQ(nlohmann::json::parse(line)["prompt_token_ids"].get<std::vector<int32_t>>(), prompt);
  }
  std::ofstream(path) << "{\"prompt\": \"ab\", \"prompt_token_ids\": [1]}\n";
  const CliRun both = run_generate("--prompts-file " + path);
  EXPECT_NE(both.err.find("exactly one of"), std::string::npos) << both.err;
  // A line nested too deep is refused before it is parsed, naming the line.
  std::ofstream(path) << "[1]\n{\"prompt_token_ids\": " << std::string(100000, '[')
                      << std::string(100000, ']') << "}\n";
  const CliRun deep = run_generate("--prompts-file " + path);
  EXPECT_EQ(deep.exit_code, 1);
  EXPECT_NE(deep.err.find(":2: JSON nested deeper than 256"), std::string::npos) << deep.err;
  EXPECT_LT(deep.err.size(), 300u);
}

TEST(GenerateCliTest, BadInputIsOneLineAndNonZero) {
  const std::pair<std::string, std::string> cases[] = {
      {"--prompt-ids 1,x,3", "'x' is not a token id"},
      {"--prompt-ids 1,,3", "'' is not a token id"},
      {"--prompt-ids 1,999", "token id 999"},
      {"--prompt-ids 1 --max-tokens 1000", "exceeds max_model_len 256"},
      {"--prompt-ids 1 --temperature -1", "temperature is -1"},
      {"--prompt-ids 1 --top-p 2", "top_p is 2"},
      {"--prompt-ids 1 --stop-token-ids 7,999", "stop token id 999"},
      {"--prompt-ids 1 --device cuda:99", "--device cuda:99: this "},
      {"--prompt-ids 1 --device gpu", "unknown device 'gpu'"},
      {"--prompt-ids 1 --load-format gguf", "unknown load format 'gguf'"},
      {"--prompt-ids 1 --quantization int4", "unknown --quantization 'int4'"},
      {"--prompt-ids 1 --kv-cache-dtype int8", "--kv-cache-dtype int8: expected auto, bfloat16"},
      {"--prompt-ids 1 --gpu-memory-utilization nan", "--gpu-memory-utilization nan"},
      {"", "no prompts"},
      {"--prompts-file /nonexistent/prompts.jsonl", "cannot read prompts file"},
      // A device is refused, not read without end.
      {"--prompts-file /dev/zero", "cannot read prompts file '/dev/zero'"},
  };
  for (const auto& [args, message] : cases) {
    const CliRun run = run_generate(args);
    EXPECT_EQ(run.exit_code, 1) << args << ": " << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << args << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << args << ": " << run.err;
  }
}

TEST(GenerateCliTest, SeededSamplingIgnoresTheBatch) {
  const ScratchDir scratch("requests");
  const std::string path = scratch.file("requests");
  const std::string seeded =
      R"({"prompt_token_ids": [3, 1, 4], "temperature": 1.0, "top_p": 0.9, "seed": 5, )"
      R"("max_tokens": 12, "ignore_eos": true})";
  const std::string other =
      R"({"prompt_token_ids": [2, 7, 1, 8, 2, 8], "temperature": 0.8, "max_tokens": 5})";
  // The tokens of the request whose prompt is [3, 1, 4], wherever it stands in the file.
  auto seeded_tokens = [&](const std::string& lines) {
    std::ofstream(path) << lines;
    const CliRun run = run_generate("--prompts-file " + path + " --json");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::istringstream results(run.out);
    std::string line;
    while (std::getline(results, line)) {
      const nlohmann::json result = nlohmann::json::parse(line);
      if (result["prompt_token_ids"] == nlohmann::json{3, 1, 4}) return result["token_ids"];
    }
    ADD_FAILURE() << "no result for the seeded request";
    return nlohmann::json();
  };
  const nlohmann::json alone = seeded_tokens(seeded + "\n");
  EXPECT_EQ(alone.size(), 12u);
  EXPECT_EQ(seeded_tokens(other + "\n" + seeded + "\n" + other + "\n"), alone);
  EXPECT_EQ(seeded_tokens(other + "\n" + other + "\n" + seeded + "\n"), alone);
  std::ofstream(path) << R"({"prompt_token_ids": [1], "temprature": 0.5})"
                      << "\n";
  const CliRun typo = run_generate("--prompts-file " + path);
  EXPECT_NE(typo.err.find("unknown request field 'temprature'"), std::string::npos) << typo.err;
}

// Text and chat prompts, with the byte-level tokenizer fixture (ids are the UTF-8 bytes).
TEST(GenerateCliTest, TextAndChatPrompts) {
  const std::string tokenizer_dir =
      std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/byte-tokenizer";
  const ScratchDir scratch("messages");
  const std::string messages = scratch.file("messages");
  std::ofstream(messages) << R"([{"role": "system", "content": "Be brief."}, )"
                          << R"({"role": "user", "content": "Héllo"}])";
  const CliRun run = run_generate("--tokenizer " + tokenizer_dir +
                                  " 'Hi there' --chat --prompt 'Bye' --messages " + messages +
                                  " --max-tokens 5 --ignore-eos --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_dir);
  std::istringstream lines(run.out);
  std::string line;
  for (const std::string prompt : {"<user>Hi there\n<assistant>", "<user>Bye\n<assistant>",
                                   "<system>Be brief.\n<user>Héllo\n<assistant>"}) {
    ASSERT_TRUE(std::getline(lines, line));
    const nlohmann::json result = nlohmann::json::parse(line);
    EXPECT_EQ(result["prompt_token_ids"].get<std::vector<int32_t>>(), bytes_of(prompt));
    const auto ids = result["token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids.size(), 5u);
    EXPECT_EQ(result["text"], tokenizer.decode(ids, {.skip_special_tokens = true}));
  }
  // Without --chat a text prompt is encoded as it is; the plain output is the decoded text.
  const CliRun plain = run_generate("--tokenizer " + tokenizer_dir +
                                    " 'Hi there' --max-tokens 4 "
                                    "--ignore-eos --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["prompt_token_ids"].get<std::vector<int32_t>>(),
            bytes_of("Hi there"));
  // The model directory has no tokenizer.json: text needs one.
  const CliRun no_tokenizer = run_generate("'Hi there'");
  EXPECT_EQ(no_tokenizer.exit_code, 1);
  EXPECT_NE(no_tokenizer.err.find("needs a tokenizer"), std::string::npos) << no_tokenizer.err;
}

// With no --model, the embedded default model runs, tokenizer and all.
TEST(GenerateCliTest, DefaultModelNeedsNoFlags) {
  const CliRun run = run_pagoda("generate 'And God said' --max-tokens 12 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = nlohmann::json::parse(run.out);
  const Tokenizer tokenizer =
      Tokenizer::load(std::string(PAGODA_SOURCE_DIR) + "/models/kjv-gemma4");
  EXPECT_EQ(result["prompt_token_ids"].get<std::vector<int32_t>>(),
            tokenizer.encode("And God said"));
  EXPECT_EQ(result["token_ids"].size(), 12u);
  EXPECT_FALSE(result["text"].get<std::string>().empty());
  const CliRun plain = run_pagoda("generate 'And God said' --max-tokens 12");
  EXPECT_EQ(plain.out, result["text"].get<std::string>() + "\n");
}

// The embedded model's chat template renders a chat as the plain text it continues; and
// --chat-template replaces a model's template with a file or the template itself.
TEST(GenerateCliTest, TheEmbeddedModelChatsAndTheTemplateCanBeReplaced) {
  const Tokenizer tokenizer =
      Tokenizer::load(std::string(PAGODA_SOURCE_DIR) + "/models/kjv-gemma4");
  const CliRun chat = run_pagoda("generate --chat 'And God said' --max-tokens 4 --json");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_EQ(nlohmann::json::parse(chat.out)["prompt_token_ids"].get<std::vector<int32_t>>(),
            tokenizer.encode("And God said"));

  const ScratchDir scratch("template");
  const std::string file = scratch.file("template");
  std::ofstream(file) << "{{ bos_token }}Thus: {{ messages[0]['content'] }}";
  // Inline, also longer than a file name may be (a Jinja comment of 300 bytes in it).
  for (const std::string& given :
       {file, std::string("'{{ bos_token }}Thus: {{ messages[0][\"content\"] }}'"),
        "'{# " + std::string(300, 'x') +
            " #}{{ bos_token }}Thus: {{ messages[0][\"content\"] }}'"}) {
    const CliRun replaced =
        run_pagoda("generate --chat 'And God said' --max-tokens 4 --json --chat-template " + given);
    ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
    EXPECT_EQ(nlohmann::json::parse(replaced.out)["prompt_token_ids"].get<std::vector<int32_t>>(),
              tokenizer.encode("Thus: And God said"))
        << given;
  }
  const CliRun missing = run_pagoda("generate --chat hi --chat-template /no/such/file");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("--chat-template: no file '/no/such/file'"), std::string::npos)
      << missing.err;
}

TEST(TokenizeCliTest, ShowsIdsAndPiecesOrDecodes) {
  const std::string model = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/byte-tokenizer";
  const CliRun run = run_pagoda("tokenize --model " + model + " 'a b' --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = nlohmann::json::parse(run.out);
  EXPECT_EQ(result["ids"], (nlohmann::json{97, 32, 98}));
  EXPECT_EQ(result["tokens"], (nlohmann::json{"a", "Ġ", "b"}));
  const CliRun table = run_pagoda("tokenize --model " + model + " 'a b'");
  EXPECT_NE(table.out.find("3 tokens"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\"Ġ\""), std::string::npos) << table.out;
  const CliRun decoded = run_pagoda("tokenize --model " + model + " --ids 104,105");
  EXPECT_EQ(decoded.out, "hi\n");
  const CliRun bad = run_pagoda("tokenize --model " + model + " --ids 1,300");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("token id 300 is outside the vocabulary"), std::string::npos) << bad.err;
  // Invalid UTF-8 in the text is written as U+FFFD in the JSON (the JSON library threw: internal
  // error, exit 2).
  const CliRun invalid =
      run_pagoda("tokenize --model " + model + " \"$(printf 'ab\\200cd')\" --json");
  ASSERT_EQ(invalid.exit_code, 0) << invalid.err;
  EXPECT_EQ(nlohmann::json::parse(invalid.out)["text"],
            "ab\xEF\xBF\xBD"
            "cd");
  const CliRun missing = run_pagoda("tokenize --model /nonexistent x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("tokenizer.json"), std::string::npos) << missing.err;
}

// An FP8 checkpoint generates its reference's greedy tokens through the CLI, and cannot be run
// unquantized; --quantization fp8 quantizes a plain checkpoint at load.
TEST(GenerateCliTest, Fp8Checkpoints) {
  const std::string fixture = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-fp8-tiny";
  std::ifstream file(fixture + "/reference.json");
  const nlohmann::json prompt = nlohmann::json::parse(file)["prompts"][2];
  const std::vector<int32_t> greedy = prompt["greedy_token_ids"].get<std::vector<int32_t>>();
  const std::string args =
      " --prompt-ids " + ids_text(prompt["prompt_token_ids"].get<std::vector<int32_t>>()) +
      " --max-tokens " + std::to_string(greedy.size()) + " --ignore-eos --json";
  const CliRun run = run_pagoda("generate --model " + fixture + args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["token_ids"].get<std::vector<int32_t>>(), greedy);
  const CliRun none = run_pagoda("generate --model " + fixture + args + " --quantization none");
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("stored in FP8"), std::string::npos) << none.err;
  const CliRun at_load = run_generate("--prompt-ids 1,2,3 --max-tokens 4 --quantization fp8");
  EXPECT_EQ(at_load.exit_code, 0) << at_load.err;
}

TEST(GenerateCliTest, DummyWeightsNeedNoCheckpoint) {
  // A directory holding only the config of a fixture: no weights.
  const ScratchDir scratch("dummy");
  const std::string& dir = scratch.path();
  std::ofstream(dir + "/config.json")
      << read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/qwen3-tiny/config.json");
  const std::string base = std::string(PAGODA_BINARY) + " generate --model " + dir +
                           " --prompt-ids 1,2,3 --max-tokens 3 --ignore-eos";
  EXPECT_EQ(std::system((base + " --load-format dummy >/dev/null 2>&1").c_str()), 0);
  EXPECT_NE(std::system((base + " >/dev/null 2>&1").c_str()), 0);  // no checkpoint there
}

// A negative seed is refused rather than read as 2^64 - 1.
TEST(GenerateCliTest, SeedsAreNotNegative) {
  for (const char* flag : {"--seed", "--request-seed"}) {
    const CliRun run = run_generate(std::string("--prompt-ids 1 ") + flag + " -1");
    EXPECT_NE(run.exit_code, 0) << flag;
    EXPECT_NE(run.err.find(std::string(flag) + ": '-1' is negative"), std::string::npos) << run.err;
  }
}

// generation_config.json's EOS ids end a request as config.json's do (a chat model's end of turn is
// often there only); its sampling defaults are not generate's, whose flags are greedy by default.
TEST(GenerateCliTest, GenerationConfigEosIdsEndRequests) {
  const ScratchDir scratch("generation");
  const std::string& dir = scratch.path();
  std::ofstream(dir + "/config.json")
      << read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny/config.json");
  const std::string args =
      "generate --model " + dir + " --load-format dummy --prompt-ids 1,2,3 --max-tokens 6 --json";
  const CliRun plain = run_pagoda(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const nlohmann::json first = nlohmann::json::parse(plain.out);
  ASSERT_FALSE(first["token_ids"].empty());
  const int64_t end_of_turn = first["token_ids"][0];
  std::ofstream(dir + "/generation_config.json")
      << nlohmann::json{{"eos_token_id", {2, end_of_turn}}, {"temperature", 0.7}}.dump();
  const CliRun stopped = run_pagoda(args);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  const nlohmann::json out = nlohmann::json::parse(stopped.out);
  EXPECT_EQ(out["token_ids"], nlohmann::json::array({end_of_turn}));
  EXPECT_EQ(out["finish_reason"], "stop");
  EXPECT_EQ(out["logprobs"][0]["logprob"], first["logprobs"][0]["logprob"]);  // still greedy

  const CliRun missing = run_pagoda(args + " --generation-config /nonexistent");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("--generation-config /nonexistent: expected auto, vllm, or a "
                             "directory with generation_config.json"),
            std::string::npos)
      << missing.err;
}

// A Gemma 4 whose per-layer table is shorter than its vocabulary (vocab_size_per_layer_input 128
// of 256) reads row 0 of it for later tokens, as transformers does, rather than failing the
// request; a negative norm epsilon is refused naming the field.
TEST(GenerateCliTest, Gemma4PerLayerTableShorterThanTheVocabulary) {
  const ScratchDir scratch("ple");
  const std::string& dir = scratch.path();
  nlohmann::json config = nlohmann::json::parse(
      read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/gemma4-tiny/config.json"));
  const nlohmann::json original = config;
  config["vocab_size_per_layer_input"] = 128;
  std::ofstream(dir + "/config.json") << config.dump();
  const std::string args = "generate --model " + dir +
                           " --load-format dummy --prompt-ids 5,200,255,130 --max-tokens 8 "
                           "--ignore-eos --json";
  const CliRun run = run_pagoda(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["token_ids"].size(), 8u);

  config = original;
  config["rms_norm_eps"] = -1;
  std::ofstream(dir + "/config.json") << config.dump();
  const CliRun negative = run_pagoda(args);
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_NE(negative.err.find("'rms_norm_eps' is -1; expected a number in [0, 1]"),
            std::string::npos)
      << negative.err;
}

// Sizes each within the config reader's bounds whose products pass 64 bits (a 2^31-token
// vocabulary of 2^40-wide embeddings) end in one line, not in a tensor whose size wrapped around.
TEST(GenerateCliTest, ConfigSizesPast64BitsFailInOneLine) {
  const ScratchDir scratch("huge");
  const std::string& dir = scratch.path();
  nlohmann::json config = nlohmann::json::parse(
      read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny/config.json"));
  config["vocab_size"] = INT32_MAX;
  config["hidden_size"] = int64_t{1} << 40;
  config["intermediate_size"] = 1;
  config["num_attention_heads"] = 1;
  config["num_key_value_heads"] = 1;
  const auto run_with = [&](const nlohmann::json& written) {
    std::ofstream(dir + "/config.json") << written.dump();
    const CliRun run = run_pagoda("generate --model " + dir +
                                  " --load-format dummy --prompt-ids 1 --max-tokens 1");
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    return run.err;
  };
  EXPECT_NE(run_with(config).find("64-bit"), std::string::npos);
  // Token ids are 32-bit: a larger vocabulary is refused by name.
  config["vocab_size"] = int64_t{1} << 40;
  EXPECT_NE(run_with(config).find("vocab_size"), std::string::npos);
  // Kernels count a window in 32 bits (a 2^32 + 5 window was 5 on a GPU).
  config = nlohmann::json::parse(
      read_file(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/qwen3-tiny/config.json"));
  config["layer_types"] = {"full_attention", "sliding_attention"};
  config["sliding_window"] = (int64_t{1} << 32) + 5;
  EXPECT_NE(run_with(config).find("sliding window of 4294967301 tokens; it must be in [1, 2^30]"),
            std::string::npos);
}

// Fields the model's layers read (epsilons, scales, rope parameters) with a null, a missing or a
// wrongly typed value: null means the default, the others end in one line naming the field.
TEST(GenerateCliTest, ModelFieldsOfTheWrongTypeFailInOneLine) {
  struct Case {
    const char* fixture;
    const char* field;
    nlohmann::json value;  // null: the field is removed when `remove`
    bool remove;
    const char* expected;  // in the error; empty: the run succeeds
  };
  const Case cases[] = {
      {"llama-tiny", "rms_norm_eps", "small", false, "rms_norm_eps"},
      {"llama-tiny", "rms_norm_eps", nullptr, false, ""},
      {"gemma4-tiny", "rope_parameters", nullptr, true, "rope_parameters"},
      {"gemma4-tiny", "final_logit_softcapping", "x", false, "final_logit_softcapping"},
      {"mimo-tiny", "routed_scaling_factor", nullptr, false, ""},
      {"mimo-tiny", "attention_value_scale", nlohmann::json::array({1}), false,
       "attention_value_scale"},
  };
  const ScratchDir scratch("fields");
  const std::string& dir = scratch.path();
  for (const Case& c : cases) {
    nlohmann::json config = nlohmann::json::parse(read_file(
        std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + c.fixture + "/config.json"));
    if (c.remove) {
      config.erase(c.field);
    } else {
      config[c.field] = c.value;
    }
    std::ofstream(dir + "/config.json") << config.dump();
    const CliRun run = run_pagoda("generate --model " + dir +
                                  " --load-format dummy --prompt-ids 1 --max-tokens 1");
    const std::string what = std::string(c.fixture) + " " + c.field + " " + c.value.dump();
    if (*c.expected == '\0') {
      EXPECT_EQ(run.exit_code, 0) << what << ": " << run.err;
      continue;
    }
    EXPECT_EQ(run.exit_code, 1) << what << ": " << run.err;
    EXPECT_NE(run.err.find(c.expected), std::string::npos) << what << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << what << ": " << run.err;
  }
}

// In `dir`'s model.safetensors, the first value of the first tensor `pick` accepts (given its name
// and dtype, in the header's order) becomes `value(dtype)`'s bytes. Returns that tensor's name.
std::string overwrite_first_value(
    const std::string& dir, const std::function<bool(const std::string&, const std::string&)>& pick,
    const std::function<std::string(const std::string&)>& value) {
  std::fstream file(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_size = 0;
  file.read(reinterpret_cast<char*>(&header_size), 8);
  std::string header(header_size, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_size));
  const nlohmann::json entries = nlohmann::json::parse(header);
  for (const auto& [name, entry] : entries.items()) {
    if (name == "__metadata__" || !pick(name, entry["dtype"])) continue;
    file.seekp(
        static_cast<std::streamoff>(8 + header_size + entry["data_offsets"][0].get<uint64_t>()));
    const std::string bytes = value(entry["dtype"]);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return name;
  }
  ADD_FAILURE() << "no tensor to overwrite in " << dir;
  return "";
}

template <typename T>
std::string bytes_of(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
}

// An FP8 block scale of 0, below 0 or not finite is refused at load, naming the scale tensor.
TEST(GenerateCliTest, Fp8ScalesMustBeFiniteAndPositive) {
  const std::string fixture = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-fp8-tiny";
  const ScratchDir scratch("scale");
  const std::string dir = scratch.file("checkpoint");
  const std::string scale = "model.layers.1.mlp.up_proj.weight_scale_inv";
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    std::system(("rm -rf " + dir + " && cp -r " + fixture + " " + dir).c_str());
    const std::string name = overwrite_first_value(
        dir, [&](const std::string& n, const std::string& dtype) { return n == scale; },
        [&](const std::string& dtype) {
          EXPECT_EQ(dtype, "F32");
          return bytes_of(bad);
        });
    const CliRun run = run_pagoda("generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 2");
    EXPECT_EQ(run.exit_code, 1) << bad << ": " << run.err;
    EXPECT_NE(run.err.find(name), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("finite and positive"), std::string::npos) << run.err;
  }
}

// A checkpoint with one NaN weight runs unless --check-weights asks for every weight to be read
// first; then it is refused, naming the tensor. The first tensor of llama-tiny (f32), and the
// first e4m3 one of its FP8 checkpoint, get a NaN of their dtype as their first value.
TEST(GenerateCliTest, CheckWeightsRefusesNaN) {
  for (const std::string fixture_name : {"llama-tiny", "llama-fp8-tiny"}) {
    const std::string fixture = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/" + fixture_name;
    const ScratchDir scratch("nan");
    const std::string dir = scratch.file("checkpoint");
    std::system(("rm -rf " + dir + " && cp -r " + fixture + " " + dir).c_str());
    const bool fp8 = fixture_name == "llama-fp8-tiny";
    const std::string name = overwrite_first_value(
        dir,
        [&](const std::string&, const std::string& dtype) { return !fp8 || dtype == "F8_E4M3"; },
        [](const std::string& dtype) {
          if (dtype == "F32") return bytes_of(uint32_t{0x7FC00000u});
          if (dtype == "F8_E4M3") return bytes_of(uint8_t{0x7F});
          return bytes_of(uint16_t{dtype == "BF16" ? uint16_t{0x7FC0u} : uint16_t{0x7E00u}});
        });

    const std::string base = "generate --model " + dir + " --prompt-ids 1,2,3 --max-tokens 2";
    EXPECT_EQ(run_pagoda(base).exit_code, 0) << fixture_name;
    const CliRun checked = run_pagoda(base + " --check-weights");
    EXPECT_EQ(checked.exit_code, 1) << checked.err;
    EXPECT_NE(checked.err.find("hold NaN or infinite values: " + name +
                               " (1 values, the first at index 0)"),
              std::string::npos)
        << checked.err;
    EXPECT_EQ(run_pagoda("generate --model " + fixture +
                         " --prompt-ids 1,2,3 --max-tokens 2 --check-weights")
                  .exit_code,
              0)
        << fixture_name;
  }
}

// A NaN in MiMo's router (its correction bias here) ranks that expert last, exactly as a bias of
// -infinity does: the two checkpoints generate the same tokens. Before, the routing sorts ran with
// a comparator that was no ordering.
TEST(GenerateCliTest, MiMoRouterNaNRanksLast) {
  const std::string fixture = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/mimo-tiny";
  const std::string bias = "model.layers.1.mlp.gate.e_score_correction_bias";
  std::vector<std::string> outputs;
  for (const uint32_t bits : {0x7FC00000u, 0xFF800000u}) {  // NaN, -infinity
    const ScratchDir scratch("router");
    const std::string dir = scratch.file("checkpoint");
    std::system(("rm -rf " + dir + " && cp -r " + fixture + " " + dir).c_str());
    overwrite_first_value(
        dir, [&](const std::string& n, const std::string&) { return n == bias; },
        [&](const std::string& dtype) {
          EXPECT_EQ(dtype, "F32");
          return bytes_of(bits);
        });
    const CliRun run =
        run_pagoda("generate --model " + dir + " --prompt-ids 1,2,3,4,5 --max-tokens 8");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    outputs.push_back(run.out);
  }
  EXPECT_FALSE(outputs[0].empty());
  EXPECT_EQ(outputs[0], outputs[1]);
}

// --speculative-config: the embedded model drafts with its own assistant and prints the same text,
// on one rank and on several; --stats counts the drafts.
TEST(GenerateCliTest, SpeculativeDecodingPrintsTheSameText) {
  const std::string args = "\"In the beginning\" --max-tokens 40 --stats";
  const CliRun plain = run_pagoda("generate " + args);
  const CliRun spec =
      run_pagoda("generate " + args + " --speculative-config '{\"num_speculative_tokens\": 3}'");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_EQ(plain.err.find("spec rounds"), std::string::npos);
  EXPECT_NE(spec.err.find("spec rounds"), std::string::npos) << spec.err;
  EXPECT_NE(spec.err.find("accepted/position"), std::string::npos) << spec.err;
  // On TP 2 x DCP 2 CPU ranks each rank drafts with its shard of the assistant: the same text,
  // drafts and acceptances.
  const CliRun ranks = run_pagoda("generate " + args +
                                  " --speculative-config '{\"num_speculative_tokens\": 3}' "
                                  "--tensor-parallel-size 2 --decode-context-parallel-size 2");
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;
  EXPECT_EQ(ranks.out, plain.out);
  const auto drafts_line = [](const std::string& err) {
    const size_t at = err.find("draft tokens");
    return at == std::string::npos ? std::string() : err.substr(at, err.find('\n', at) - at);
  };
  EXPECT_NE(drafts_line(spec.err), "");
  EXPECT_EQ(drafts_line(ranks.err), drafts_line(spec.err));
  // A draft model from another directory, in a JSON run.
  const std::string model = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/";
  const CliRun draft = run_generate(
      "--prompt-ids 5,6,7 --max-tokens 12 --json "
      "--speculative-config '{\"method\": \"draft_model\", \"model\": \"" +
      model + "llama3-rope-tiny\", \"num_speculative_tokens\": 2}'");
  const CliRun alone = run_generate("--prompt-ids 5,6,7 --max-tokens 12 --json");
  ASSERT_EQ(draft.exit_code, 0) << draft.err;
  EXPECT_EQ(draft.out, alone.out);
  // An FP8 target cache beside the draft model's bf16 pages, in one pool: the target's text with
  // an FP8 cache of its own.
  const CliRun mixed = run_generate(
      "--prompt-ids 5,6,7 --max-tokens 12 --json --kv-cache-dtype fp8 "
      "--speculative-config '{\"model\": \"" +
      model +
      "llama3-rope-tiny\", \"num_speculative_tokens\": 2, \"kv_cache_dtype\": \"bfloat16\"}'");
  const CliRun fp8 = run_generate("--prompt-ids 5,6,7 --max-tokens 12 --json --kv-cache-dtype fp8");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  ASSERT_EQ(fp8.exit_code, 0) << fp8.err;
  EXPECT_EQ(mixed.out, fp8.out);
}

// --kv-cache-dtype-skip-layers: skipping both of llama-tiny's layers keeps the whole cache in
// the model's own dtype (f32), so the output is the default cache's, log-probabilities too;
// skipping one is neither that nor the all-e4m3 cache's. Gemma 4's sliding-window layers, with
// the layers that share their KV, run in f32 beside e4m3 full-attention pages.
TEST(GenerateCliTest, KvCacheDtypeSkipLayers) {
  const std::string args = "--prompt-ids 5,6,7,8,9 --max-tokens 12 --ignore-eos --json";
  const CliRun plain = run_generate(args);
  const CliRun fp8 = run_generate(args + " --kv-cache-dtype fp8");
  const CliRun both = run_generate(args + " --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 0,1");
  const CliRun one = run_generate(args + " --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 1");
  for (const CliRun* run : {&plain, &fp8, &both, &one})
    ASSERT_EQ(run->exit_code, 0) << run->err;
  EXPECT_EQ(both.out, plain.out);
  EXPECT_NE(fp8.out, plain.out);
  EXPECT_NE(one.out, plain.out);
  EXPECT_NE(one.out, fp8.out);

  const std::string gemma = "generate --model " + std::string(PAGODA_SOURCE_DIR) +
                            "/tests/fixtures/gemma4-tiny " + args + " --kv-cache-dtype fp8";
  const CliRun all_e4m3 = run_pagoda(gemma);
  const CliRun sliding = run_pagoda(gemma + " --kv-cache-dtype-skip-layers sliding_window");
  ASSERT_EQ(all_e4m3.exit_code, 0) << all_e4m3.err;
  ASSERT_EQ(sliding.exit_code, 0) << sliding.err;
  EXPECT_NE(sliding.out, all_e4m3.out);
}

// A list flag takes one word (its items comma-separated, the flag repeatable): the word after it
// stays a prompt.
TEST(GenerateCliTest, ListFlagsLeaveThePromptAlone) {
  const std::string tokenizer =
      " --tokenizer " + std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/byte-tokenizer";
  for (const std::string flags :
       {"--stop-token-ids 250,251", "--kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 0"}) {
    const CliRun run = run_generate(flags + tokenizer + " Hello --max-tokens 2 --json");
    ASSERT_EQ(run.exit_code, 0) << flags << ": " << run.err;
    EXPECT_EQ(nlohmann::json::parse(run.out)["prompt_token_ids"].size(), 5u) << flags;
  }
}

// Bad combinations stop before anything loads, with one line naming the reason.
TEST(GenerateCliTest, SpeculativeConfigErrorsNameTheReason) {
  const std::string fixtures = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/";
  const struct {
    std::string config;
    std::string says;
  } cases[] = {
      {R"({"num_speculative_tokens": 0})", "1..16"},
      {R"({"num_speculative_tokens": 2, "model": ")" + fixtures + R"(byte-tokenizer"})",
       "config.json"},
      {R"({"num_speculative_tokens": 2, "typo": 1})", "typo"},
      {R"({"num_speculative_tokens": 2, "model": ")" + fixtures + R"(gemma4-assistant-tiny"})",
       "vocabularies differ"},
      {"{", "JSON"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config);
    const CliRun run =
        run_pagoda("generate x --max-tokens 2 --speculative-config '" + c.config + "'");
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_NE(run.err.find(c.says), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }
}

// --tensor-parallel-size splits the model over CPU ranks and prints what one rank prints; sizes
// the model cannot split over, and combinations not supported yet, fail before loading with one
// line naming the reason.
TEST(GenerateCliTest, ParallelRanksPrintWhatOneRankPrints) {
  const nlohmann::json prompt = reference_prompt(1);
  const std::string args = "--prompt-ids " + ids_text(prompt["prompt_token_ids"]) +
                           " --max-tokens 8 --logprobs 1 --ignore-eos --json";
  const CliRun one = run_generate(args);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  for (const std::string split :
       {"--tensor-parallel-size 2", "--tensor-parallel-size 4", "--decode-context-parallel-size 2",
        "--tensor-parallel-size 2 --decode-context-parallel-size 2 "
        "--dcp-kv-cache-interleave-size 4",
        "--tensor-parallel-size 4 --decode-context-parallel-size 2"}) {
    const CliRun many = run_generate(args + " " + split);
    ASSERT_EQ(many.exit_code, 0) << many.err;
    const nlohmann::json a = nlohmann::json::parse(one.out);
    const nlohmann::json b = nlohmann::json::parse(many.out);
    EXPECT_EQ(b["token_ids"], a["token_ids"]) << split;
    for (size_t t = 0; t < a["logprobs"].size(); ++t) {
      EXPECT_NEAR(b["logprobs"][t]["logprob"].get<double>(),
                  a["logprobs"][t]["logprob"].get<double>(), 1e-4);
    }
  }
  const struct {
    std::string command;
    std::string says;
  } refused[] = {
      {"generate --model " + std::string(PAGODA_SOURCE_DIR) +
           "/tests/fixtures/llama-tiny --prompt-ids 1,2 --tensor-parallel-size 3",
       "do not split over 3 ranks"},
      {"generate --model " + std::string(PAGODA_SOURCE_DIR) +
           "/tests/fixtures/llama-tiny --prompt-ids 1,2 --tensor-parallel-size 0",
       "tensor-parallel-size"},
      {"generate --model " + std::string(PAGODA_SOURCE_DIR) +
           "/tests/fixtures/llama-tiny --prompt-ids 1,2 --tensor-parallel-size 4 "
           "--decode-context-parallel-size 3",
       "the DCP size must divide the TP size"},
      {"generate --model " + std::string(PAGODA_SOURCE_DIR) +
           "/tests/fixtures/llama-tiny --prompt-ids 1,2 --decode-context-parallel-size 2 "
           "--dcp-kv-cache-interleave-size 3",
       "--dcp-kv-cache-interleave-size 3 does not divide the block size 16"},
  };
  for (const auto& c : refused) {
    SCOPED_TRACE(c.command);
    const CliRun run = run_pagoda(c.command);
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find(c.says), std::string::npos) << run.err;
  }
}

}  // namespace
}  // namespace pagoda
