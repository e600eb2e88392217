#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

const Tokenizer& byte_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::load(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/byte-tokenizer");
  return tokenizer;
}

OpenAiRequest parse(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  static const ChatTemplate chat(byte_tokenizer());
  return parse_openai_request(Json::parse(body), endpoint, byte_tokenizer(), &chat,
                              {.served_model_name = "m", .max_model_len = 64});
}

TEST(OpenAiRequestTest, CompletionFields) {
  const OpenAiRequest r = parse(
      R"({"model": "m", "prompt": ["ab", [1, 2]], "n": 2, "max_tokens": 5, "temperature": 0.5,
          "top_p": 0.9, "top_k": 4, "seed": 7, "stop": "x", "logprobs": 3, "echo": true,
          "stream": true, "stream_options": {"include_usage": true}, "user": "ignored"})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(r.prompts[1], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.prompt_texts[0], "ab");
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.top_k, 4);
  EXPECT_EQ(r.params.seed, 7u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_TRUE(r.echo && r.stream && r.include_usage);
  EXPECT_EQ(parse(R"({"prompt": "a", "prompt_logprobs": 2})").params.prompt_logprobs, 2);
}

TEST(OpenAiRequestTest, ChatFieldsAndDefaults) {
  const OpenAiRequest r = parse(
      R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 2})",
      Endpoint::kChatCompletions);
  const std::string prompt = "<user>hi\n<assistant>";
  EXPECT_EQ(r.prompts[0], std::vector<int32_t>(prompt.begin(), prompt.end()));
  EXPECT_EQ(r.logprobs, 2);
  // Without max_tokens a chat reply may fill the rest of the context.
  EXPECT_EQ(r.params.max_tokens, 64 - static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(parse(R"({"prompt": "a"})").params.max_tokens, 16);
  EXPECT_EQ(parse(R"({"prompt": "a"})").logprobs, -1);
}

// The model's generation_config.json defaults fill the sampling fields a request leaves out; its
// max_new_tokens also caps a chat reply's default length.
TEST(OpenAiRequestTest, TheModelsGenerationDefaultsFillFieldsLeftOut) {
  static const ChatTemplate chat(byte_tokenizer());
  const RequestLimits limits{
      .served_model_name = "m",
      .max_model_len = 64,
      .generation = {.temperature = 0.6, .top_k = 20, .top_p = 0.95, .max_new_tokens = 10}};
  const auto parse_with = [&](const std::string& body, Endpoint endpoint) {
    return parse_openai_request(Json::parse(body), endpoint, byte_tokenizer(), &chat, limits);
  };
  const SamplingParams left_out = parse_with(R"({"prompt": "a"})", Endpoint::kCompletions).params;
  EXPECT_EQ(left_out.temperature, 0.6);
  EXPECT_EQ(left_out.top_k, 20);
  EXPECT_EQ(left_out.top_p, 0.95);
  EXPECT_EQ(left_out.min_p, 0.0);
  EXPECT_EQ(left_out.max_tokens, 10);
  const SamplingParams given =
      parse_with(R"({"prompt": "a", "temperature": 0, "top_k": null, "max_tokens": 30})",
                 Endpoint::kCompletions)
          .params;
  EXPECT_EQ(given.temperature, 0.0);
  EXPECT_EQ(given.top_k, 20);  // null leaves the default
  EXPECT_EQ(given.max_tokens, 30);
  const std::string hi = R"({"messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(parse_with(hi + "}", Endpoint::kChatCompletions).params.max_tokens, 10);
  EXPECT_EQ(parse_with(hi + R"(, "max_tokens": 40})", Endpoint::kChatCompletions).params.max_tokens,
            40);
}

// A response that is not streamed holds all its log-probabilities at once: their count is bounded
// (choices × (max_tokens × (top + 1) + prompt × (prompt top + 1))); a stream holds none.
TEST(OpenAiRequestTest, LogprobsAResponseWouldHoldAreBounded) {
  static const ChatTemplate chat(byte_tokenizer());
  const RequestLimits limits{
      .served_model_name = "m", .max_model_len = 64, .max_response_logprobs = 1000};
  const auto param_of = [&](const std::string& body) -> std::string {
    try {
      parse_openai_request(Json::parse(body), Endpoint::kCompletions, byte_tokenizer(), &chat,
                           limits);
    } catch (const ApiError& error) {
      return error.param;
    }
    return "accepted";
  };
  // 2 choices × 20 tokens × 21 = 840.
  EXPECT_EQ(param_of(R"({"prompt": "a", "n": 2, "max_tokens": 20, "logprobs": 20})"), "accepted");
  EXPECT_EQ(param_of(R"({"prompt": "a", "n": 3, "max_tokens": 20, "logprobs": 20})"), "logprobs");
  EXPECT_EQ(param_of(R"({"prompt": "a", "n": 3, "max_tokens": 20, "logprobs": 20,
                         "stream": true})"),
            "accepted");
  // max_tokens counts up to the context: 63 tokens × 21 at most, whatever it asks.
  EXPECT_EQ(param_of(R"({"prompt": "a", "max_tokens": 4611686018427387904, "logprobs": 20})"),
            "logprobs");
  // A 50-token prompt × 21, four times.
  const std::string prompt(50, 'p');
  EXPECT_EQ(param_of(R"({"prompt": ")" + prompt + R"(", "n": 4, "prompt_logprobs": 20})"),
            "prompt_logprobs");
}

TEST(OpenAiRequestTest, BadRequestsNameTheParameter) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([])", ""},
      {R"({})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": [[]]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": "a", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "n": 0})", "n"},
      {R"({"prompt": "a", "n": 1000})", "n"},
      {R"({"prompt": "a", "stop": [1]})", "stop"},
      {R"({"prompt": "a", "stop": 7})", "stop"},
      {R"({"prompt": "a", "stream": "yes"})", "stream"},
      {R"({"prompt": "a", "logprobs": 100})", "logprobs"},
      {R"({"prompt": "a", "logprobs": -1})", "logprobs"},
      {R"({"prompt": "a", "seed": 1.5})", "seed"},
      {R"({"prompt": "a", "a_future_field": 1})", "a_future_field"},
      {R"({"prompt": "a", "prompt_logprobs": "all"})", "prompt_logprobs"},
      {R"({"prompt": "a", "prompt_logprobs": 21})", "prompt_logprobs"},
      {R"({"prompt": "a", "top_logprobs": 2})", "top_logprobs"},
      // Refused as vLLM refuses them: an empty stop string matches everywhere, stream options
      // belong to streams, and the user is a string.
      {R"({"prompt": "a", "stop": ""})", "stop"},
      {R"({"prompt": "a", "stop": ["x", ""]})", "stop"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "a", "stream": false, "stream_options": {}})", "stream_options"},
      {R"({"prompt": "a", "user": {"id": 1}})", "user"},
  };
  for (const auto& [body, param] : cases) {
    try {
      parse(body);
      ADD_FAILURE() << body << " was accepted";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << body;
      EXPECT_EQ(error.param, param) << body << ": " << error.what();
    }
  }
  // A message without a role is named by an excerpt, not echoed whole (a 900 KB one made a 900 KB
  // error message).
  try {
    parse(nlohmann::json{{"messages", {{{"content", std::string(900000, 'x')}}}}}.dump(),
          Endpoint::kChatCompletions);
    ADD_FAILURE() << "a message without a role was accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.param, "messages");
    EXPECT_LT(std::string(error.what()).size(), 200u) << std::string(error.what()).substr(0, 300);
  }
  // A chat request's top_logprobs needs logprobs: true, as vLLM has it.
  for (
      const char* body :
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})",
       R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": false, "top_logprobs": 2})",
       R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": "abc"})"}) {
    try {
      parse(body, Endpoint::kChatCompletions);
      ADD_FAILURE() << body << " was accepted";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.param, "top_logprobs") << body << ": " << error.what();
    }
  }
  // Stop strings past their limits: each is matched against every generated byte.
  const auto stops = [](size_t count, size_t bytes) {
    return nlohmann::json{{"prompt", "a"},
                          {"stop", std::vector<std::string>(count, std::string(bytes, 'x'))}}
        .dump();
  };
  EXPECT_NO_THROW(parse(stops(SamplingParams::kMaxStopStrings, SamplingParams::kMaxStopBytes)));
  for (const std::string& body : {stops(SamplingParams::kMaxStopStrings + 1, 1),
                                  stops(1, SamplingParams::kMaxStopBytes + 1)}) {
    try {
      parse(body);
      ADD_FAILURE() << "stop strings past the limits were accepted";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400);
      EXPECT_EQ(error.param, "stop") << error.what();
    }
  }
  // Values out of range are reported by the sampling parameters' own check.
  EXPECT_THROW(parse(R"({"prompt": "a", "temperature": -1})"), ApiError);
  EXPECT_THROW(parse(R"({"prompt": "a", "top_p": 0})"), ApiError);
  EXPECT_THROW(parse(R"({"messages": "hi"})", Endpoint::kChatCompletions), ApiError);
  EXPECT_THROW(parse(R"({"messages": [{"content": "x"}]})", Endpoint::kChatCompletions), ApiError);
  try {
    parse(R"({"model": "other", "prompt": "a"})");
    ADD_FAILURE() << "an unknown model was accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 404);
  }
}

// One small body must not start thousands of engine requests: prompts × n is capped, and a prompt
// list over the cap is refused before any of it is tokenized.
TEST(OpenAiRequestTest, CapsThePromptsTimesN) {
  static const ChatTemplate chat(byte_tokenizer());
  const RequestLimits limits{.served_model_name = "m", .max_model_len = 64, .max_choices = 6};
  auto parse_capped = [&](const std::string& body) {
    return parse_openai_request(Json::parse(body), Endpoint::kCompletions, byte_tokenizer(), &chat,
                                limits);
  };
  EXPECT_EQ(parse_capped(R"({"prompt": ["a", "b", "c"], "n": 2})").prompts.size(), 3u);
  for (const char* body : {R"({"prompt": ["a", "b", "c"], "n": 3})",
                           R"({"prompt": ["a", "b", "c", "d", "e", "f", "g"]})"}) {
    try {
      parse_capped(body);
      ADD_FAILURE() << body << " was accepted";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400) << body;
      EXPECT_NE(std::string(error.what()).find("at most 6"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace pagoda
