// The library facade (engine/llm.h) on the CPU: transformers' tokens and log-probabilities on a
// fixture, streams that add up to whole outputs, stop strings, aborts, chats, many threads at
// once, and errors for bad input before anything runs.
#include "engine/llm.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

#include "model/fixtures.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

EngineOptions fixture_options(const std::string& name) {
  EngineOptions options;
  options.paths.model_dir = checkpoint_dir(name);
  options.cache.dtype = "float32";  // as the reference computes
  options.cache.kv_cache_memory = "64MiB";
  return options;
}

// The embedded default model: no model directory given.
EngineOptions default_options() {
  EngineOptions options;
  options.cache.kv_cache_memory = "64MiB";
  return options;
}

// Whether the engine runs nothing, within a few seconds (its gauges follow each step).
bool becomes_idle(const Llm& llm) {
  for (int i = 0; i < 500; ++i) {
    const EngineService::Snapshot now = llm.stats();
    if (now.running + now.waiting == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(LlmTest, GreedyOutputsMatchTransformers) {
  const std::unique_ptr<Llm> llm = Llm::load(fixture_options("llama-tiny"));
  std::ifstream file(checkpoint_dir("llama-tiny") + "/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(file);
  for (const nlohmann::json& prompt : reference["prompts"]) {
    const GenerationRequest request = request_for(prompt);
    const Prompt input = Prompt::of_ids(request.prompt_token_ids);
    const std::vector<RequestOutput> out = llm->generate({&input, 1}, request.params);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].prompt_token_ids, request.prompt_token_ids);
    EXPECT_EQ(out[0].token_ids, prompt["greedy_token_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(out[0].finish_reason, FinishReason::kLength);
    ASSERT_EQ(out[0].logprobs.size(), out[0].token_ids.size());
    for (size_t t = 0; t < out[0].logprobs.size(); ++t) {
      EXPECT_NEAR(out[0].logprobs[t].logprob, prompt["greedy_logprobs"][t].get<double>(), 1e-4);
      EXPECT_EQ(out[0].logprobs[t].top.size(), 5u);
    }
    ASSERT_EQ(out[0].prompt_logprobs.size(), request.prompt_token_ids.size());
    EXPECT_FALSE(out[0].prompt_logprobs[0].has_value());
    for (size_t i = 1; i < out[0].prompt_logprobs.size(); ++i) {
      EXPECT_NEAR(out[0].prompt_logprobs[i]->logprob, prompt["prompt_logprobs"][i].get<double>(),
                  1e-4);
    }
  }
  // No tokenizer.json: text, detokenizing and stop strings are refused, token ids run.
  EXPECT_EQ(llm->tokenizer(), nullptr);
  const Prompt text = Prompt::of_text("hello");
  EXPECT_THROW(llm->generate({&text, 1}, {}), Error);
  EXPECT_THROW(llm->detokenize(std::vector<int32_t>{1, 2}), Error);
  const Prompt ids = Prompt::of_ids({1, 2, 3});
  EXPECT_THROW(llm->generate({&ids, 1}, {.stop = {"x"}}), Error);
}

TEST(LlmTest, ManyThreadsGenerateAtOnce) {
  const std::unique_ptr<Llm> llm = Llm::load(fixture_options("llama-tiny"));
  std::ifstream file(checkpoint_dir("llama-tiny") + "/reference.json");
  const nlohmann::json reference = nlohmann::json::parse(file);
  const nlohmann::json& prompts = reference["prompts"];
  // Each thread runs every prompt several times; all of them share the engine's batches.
  constexpr int kThreads = 6;
  std::vector<std::vector<std::vector<int32_t>>> tokens(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Prompt> inputs;
      SamplingParams params;
      for (int repeat = 0; repeat < 3; ++repeat) {
        for (const nlohmann::json& prompt : prompts) {
          const GenerationRequest request = request_for(prompt);
          inputs.push_back(Prompt::of_ids(request.prompt_token_ids));
          params = request.params;
        }
      }
      for (const RequestOutput& out : llm->generate(inputs, params))
        tokens[t].push_back(out.token_ids);
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(tokens[t].size(), 3 * prompts.size());
    for (size_t i = 0; i < tokens[t].size(); ++i) {
      EXPECT_EQ(tokens[t][i],
                prompts[i % prompts.size()]["greedy_token_ids"].get<std::vector<int32_t>>())
          << "thread " << t << " output " << i;
    }
  }
  EXPECT_TRUE(becomes_idle(*llm));
  EXPECT_EQ(llm->stats().totals.generated_tokens,
            static_cast<int64_t>(kThreads * 3 * prompts.size() * 24));
}

TEST(LlmTest, StreamsStopStringsAbortsAndChats) {
  const std::unique_ptr<Llm> llm = Llm::load(default_options());
  ASSERT_NE(llm->tokenizer(), nullptr);
  const Prompt prompt = Prompt::of_text("In the beginning God created");
  const SamplingParams greedy{.temperature = 0.0, .max_tokens = 24, .ignore_eos = true};
  const RequestOutput whole = llm->generate({&prompt, 1}, greedy)[0];
  EXPECT_EQ(whole.prompt_token_ids, llm->tokenize("In the beginning God created"));
  EXPECT_EQ(whole.text, llm->detokenize(whole.token_ids));
  ASSERT_EQ(whole.token_ids.size(), 24u);

  // Deltas add up to the whole output; the last says why it ended.
  const std::unique_ptr<LlmStream> stream = llm->stream(prompt, greedy);
  RequestOutput streamed;
  int deltas = 0;
  while (!stream->finished()) {
    const std::optional<StreamDelta> delta = stream->next();
    ASSERT_TRUE(delta.has_value());
    ++deltas;
    streamed.text += delta->text;
    streamed.token_ids.insert(streamed.token_ids.end(), delta->token_ids.begin(),
                              delta->token_ids.end());
    streamed.finish_reason = delta->finish_reason;
  }
  EXPECT_GT(deltas, 1);
  EXPECT_EQ(streamed.text, whole.text);
  EXPECT_EQ(streamed.token_ids, whole.token_ids);
  EXPECT_EQ(streamed.finish_reason, FinishReason::kLength);
  EXPECT_FALSE(stream->next(std::chrono::milliseconds(1)).has_value());

  // A stop string from the middle of the text ends it just before the string.
  const size_t cut = whole.text.size() / 2;
  const std::string stop = whole.text.substr(cut, 6);
  SamplingParams stopping = greedy;
  stopping.stop = {stop};
  const RequestOutput stopped = llm->generate({&prompt, 1}, stopping)[0];
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.text, whole.text.substr(0, whole.text.find(stop)));
  EXPECT_LT(stopped.token_ids.size(), whole.token_ids.size());

  // An aborted stream ends with abort, and the engine lets it go.
  SamplingParams endless = greedy;
  endless.max_tokens = 2000;
  const std::unique_ptr<LlmStream> aborted = llm->stream(prompt, endless);
  ASSERT_TRUE(aborted->next().has_value());
  aborted->abort();
  FinishReason reason = FinishReason::kNone;
  while (!aborted->finished()) {
    if (const std::optional<StreamDelta> delta = aborted->next()) reason = delta->finish_reason;
  }
  EXPECT_EQ(reason, FinishReason::kAbort);

  // A chat renders through the model's template.
  const nlohmann::ordered_json conversation =
      nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Who made the light?"}}});
  const RequestOutput chat = llm->chat({&conversation, 1}, greedy)[0];
  EXPECT_EQ(chat.prompt_token_ids, llm->chat_template()->encode(conversation));
  EXPECT_EQ(chat.token_ids.size(), 24u);
}

// Several threads may wait on one stream (two async iterations of it in Python, say), and another
// may abort it meanwhile: each delta reaches one of them, and together they hold the whole output.
TEST(LlmTest, ThreadsShareOneStream) {
  const std::unique_ptr<Llm> llm = Llm::load(default_options());
  const Prompt prompt = Prompt::of_text("And God said");
  const SamplingParams greedy{.temperature = 0.0, .max_tokens = 40, .ignore_eos = true};
  const std::unique_ptr<LlmStream> stream = llm->stream(prompt, greedy);
  std::mutex mutex;
  size_t tokens = 0;
  int finishes = 0;
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stream->finished()) {
        const std::optional<StreamDelta> delta = stream->next(std::chrono::milliseconds(5));
        if (!delta) continue;
        const std::lock_guard lock(mutex);
        tokens += delta->token_ids.size();
        finishes += delta->finish_reason != FinishReason::kNone;
      }
    });
  }
  for (std::thread& reader : readers)
    reader.join();
  EXPECT_EQ(tokens, 40u);
  EXPECT_EQ(finishes, 1);

  // Aborted from another thread while two wait in next().
  SamplingParams endless = greedy;
  endless.max_tokens = 2000;
  const std::unique_ptr<LlmStream> aborted = llm->stream(prompt, endless);
  std::atomic<int> aborts = 0;
  readers.clear();
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!aborted->finished()) {
        const std::optional<StreamDelta> delta = aborted->next(std::chrono::milliseconds(5));
        if (delta && delta->finish_reason == FinishReason::kAbort) ++aborts;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  aborted->abort();
  for (std::thread& reader : readers)
    reader.join();
  EXPECT_EQ(aborts, 1);
  EXPECT_TRUE(becomes_idle(*llm));
}

// With drafts a step may add several tokens; a stop string that ends inside them still cuts the
// tokens (and their log-probabilities) after the one that completed it, as one token a step
// does. Each stop string is the last three characters of the text up to another token, so some
// are completed mid-step.
TEST(LlmTest, StopStringsCutMultiTokenSteps) {
  const std::unique_ptr<Llm> plain = Llm::load(default_options());
  EngineOptions drafting = default_options();
  drafting.speculative_config = R"({"num_speculative_tokens": 3})";
  const std::unique_ptr<Llm> spec = Llm::load(drafting);
  const Prompt prompt = Prompt::of_text("In the beginning God created");
  const SamplingParams greedy{.temperature = 0.0, .max_tokens = 32, .ignore_eos = true};
  const RequestOutput whole = plain->generate({&prompt, 1}, greedy)[0];
  ASSERT_EQ(spec->generate({&prompt, 1}, greedy)[0].token_ids, whole.token_ids);
  EXPECT_GT(spec->stats().totals.spec_accepted_tokens, 0);
  int cut_inside_the_text = 0;
  for (size_t end = 4; end + 2 < whole.token_ids.size(); end += 3) {
    const std::string upto = plain->detokenize({whole.token_ids.data(), end});
    if (upto.size() < 3) continue;
    SamplingParams stopping = greedy;
    stopping.stop = {upto.substr(upto.size() - 3)};
    stopping.logprobs = 1;
    const RequestOutput one = plain->generate({&prompt, 1}, stopping)[0];
    const RequestOutput many = spec->generate({&prompt, 1}, stopping)[0];
    EXPECT_EQ(many.finish_reason, FinishReason::kStop);
    EXPECT_EQ(many.text, one.text) << "stop " << stopping.stop[0];
    EXPECT_EQ(many.token_ids, one.token_ids) << "stop " << stopping.stop[0];
    EXPECT_EQ(many.logprobs.size(), many.token_ids.size());
    if (one.token_ids.size() < whole.token_ids.size()) ++cut_inside_the_text;
  }
  EXPECT_GT(cut_inside_the_text, 3);
}

// Requests with penalties or a pending min_tokens draft too, each row judged with the penalties of
// the output and the drafts before it: on the trained model, whose text repeats words within a
// few tokens, the tokens are those without drafts.
TEST(LlmTest, PenaltiesAndMinTokensDraftWithoutChangingTokens) {
  const std::unique_ptr<Llm> plain = Llm::load(default_options());
  EngineOptions drafting = default_options();
  drafting.speculative_config = R"({"num_speculative_tokens": 4})";
  const std::unique_ptr<Llm> spec = Llm::load(drafting);
  const std::vector<Prompt> prompts = {Prompt::of_text("In the beginning God created"),
                                       Prompt::of_text("And the LORD said unto Moses"),
                                       Prompt::of_text("Blessed are the")};
  std::vector<SamplingParams> params(4, {.temperature = 0.0, .max_tokens = 40});
  params[0].repetition_penalty = 1.15;
  params[1].frequency_penalty = 0.4;
  params[1].presence_penalty = 0.2;
  params[2].frequency_penalty = -0.3;  // rewards repeats
  params[3].min_tokens = 30;
  params[3].max_tokens = 34;
  int changed = 0;
  for (const SamplingParams& p : params) {
    for (const Prompt& prompt : prompts) {
      const RequestOutput one = plain->generate({&prompt, 1}, p)[0];
      const RequestOutput many = spec->generate({&prompt, 1}, p)[0];
      EXPECT_EQ(many.token_ids, one.token_ids);
      const SamplingParams unprocessed{.temperature = 0.0, .max_tokens = p.max_tokens};
      if (plain->generate({&prompt, 1}, unprocessed)[0].token_ids != one.token_ids) ++changed;
    }
  }
  EXPECT_GE(changed, 6);  // the penalties and min_tokens change what is generated
  const GenerationStats stats = spec->stats().totals;
  EXPECT_GT(stats.spec_accepted_tokens, 0);
  EXPECT_LT(stats.spec_accepted_tokens, stats.spec_draft_tokens);
}

TEST(LlmTest, BadInputFailsBeforeAnythingRuns) {
  EXPECT_THROW(Llm::load(fixture_options("no-such-model")), Error);
  EngineOptions bad_cache = fixture_options("llama-tiny");
  bad_cache.cache.kv_cache_dtype = "int3";
  try {
    Llm::load(bad_cache);
    ADD_FAILURE() << "a KV cache of int3 loaded";
  } catch (const Error& error) {  // the message names the option
    EXPECT_NE(std::string(error.what()).find("--kv-cache-dtype int3"), std::string::npos)
        << error.what();
  }
  EngineOptions bad_device = fixture_options("llama-tiny");
  bad_device.device = "tpu";
  EXPECT_THROW(Llm::load(bad_device), Error);

  const std::unique_ptr<Llm> llm = Llm::load(fixture_options("llama-tiny"));
  const std::vector<Prompt> prompts = {Prompt::of_ids({1, 2, 3}),
                                       Prompt::of_ids({1, 1 << 30})};  // outside the vocabulary
  try {
    llm->generate(prompts, {});
    ADD_FAILURE() << "a token id outside the vocabulary ran";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("prompt 1"), std::string::npos) << error.what();
  }
  const Prompt fine = Prompt::of_ids({1, 2, 3});
  EXPECT_THROW(llm->generate({&fine, 1}, {.temperature = -1.0}), Error);
  EXPECT_THROW(llm->generate({&fine, 1}, {.max_tokens = 0}), Error);
  // Nothing of the failed calls is left running.
  EXPECT_TRUE(becomes_idle(*llm));
}

}  // namespace
}  // namespace pagoda
