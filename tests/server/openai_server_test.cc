#include "server/openai_server.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <sstream>
#include <thread>

#include "engine/llm.h"
#include "server/service_fixtures.h"

namespace pagoda {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace pagoda::testing;
using std::chrono::milliseconds;

// An OpenAI server over the tiny model (poisoned: a step holding token 255 fails), serving on its
// own thread.
class Served {
 public:
  Served()
      : tokenizer_(
            Tokenizer::load(std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/byte-tokenizer")),
        poisoned_(*tiny_.model),
        engine_(poisoned_, tiny_.plan, tiny_.memory, tiny_.engine),
        server_(engine_, tokenizer_, nullptr,
                {.served_model_name = "tiny", .max_model_len = tiny_.plan.max_model_len},
                {.port = 0, .threads = 2}) {
    port = server_.bind();
    thread_ = std::thread([this] { server_.run(); });
  }
  ~Served() {
    server_.stop();
    thread_.join();
  }
  OpenAiServer& server() { return server_; }
  EngineService& engine() { return engine_; }
  PoisonedModel& model() { return poisoned_; }
  int port = 0;

 private:
  TinyModel tiny_;
  Tokenizer tokenizer_;
  PoisonedModel poisoned_;
  EngineService engine_;
  OpenAiServer server_;
  std::thread thread_;
};

// Sends one request with Connection: close and returns everything the server sent back.
std::string call(int port, const std::string& method, const std::string& path,
                 const std::string& body = "") {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  const std::string request = fmt::format(
      "{} {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      method, path, body.size(), body);
  asio::write(socket, asio::buffer(request));
  std::string out;
  boost::system::error_code error;
  asio::read(socket, asio::dynamic_buffer(out), error);
  return out;
}

// The JSON body of a response.
nlohmann::json body_of(const std::string& response) {
  const size_t start = response.find("\r\n\r\n");
  EXPECT_NE(start, std::string::npos) << response;
  return nlohmann::json::parse(response.substr(start + 4));
}

// The server over an Llm: the embedded model, drafting with its assistant when `drafts` > 0.
class ServedLlm {
 public:
  explicit ServedLlm(int drafts) : llm_(Llm::load(options(drafts))) {
    server_ = std::make_unique<OpenAiServer>(
        llm_->service(), *llm_->tokenizer(), llm_->chat_template(),
        RequestLimits{.served_model_name = "kjv", .max_model_len = llm_->plan().max_model_len},
        ServerOptions{.port = 0, .threads = 2});
    port = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~ServedLlm() {
    server_->stop();
    thread_.join();
  }
  const Llm& llm() const { return *llm_; }
  int port = 0;

 private:
  static EngineOptions options(int drafts) {
    EngineOptions options;
    options.cache.kv_cache_memory = "64MiB";
    if (drafts > 0) {
      options.speculative_config = fmt::format(R"({{"num_speculative_tokens": {}}})", drafts);
    }
    return options;
  }
  std::unique_ptr<Llm> llm_;
  std::unique_ptr<OpenAiServer> server_;
  std::thread thread_;
};

// With drafts a step may add several tokens; a stop string completed inside them ends the text,
// the usage count and the log-probabilities at the token that completed it, as without drafts.
TEST(OpenAiServerTest, StopStringsCutMultiTokenSteps) {
  ServedLlm plain(0);
  ServedLlm spec(3);
  const auto complete = [](const ServedLlm& served, const nlohmann::json& stop) {
    nlohmann::json request = {{"prompt", "In the beginning God created"},
                              {"max_tokens", 32},
                              {"temperature", 0},
                              {"logprobs", 1}};
    if (!stop.is_null()) request["stop"] = stop;
    return body_of(call(served.port, "POST", "/v1/completions", request.dump()));
  };
  const nlohmann::json whole = complete(plain, nullptr);
  const std::string text = whole["choices"][0]["text"];
  ASSERT_EQ(complete(spec, nullptr)["choices"][0]["text"], text);
  ASSERT_GT(text.size(), 20u);
  int cut_inside_the_text = 0;
  for (size_t end = 6; end < text.size(); end += 5) {
    const std::string stop = text.substr(end - 3, 3);
    const nlohmann::json one = complete(plain, nlohmann::json::array({stop}));
    const nlohmann::json many = complete(spec, nlohmann::json::array({stop}));
    EXPECT_EQ(many["choices"][0]["finish_reason"], "stop") << stop;
    EXPECT_EQ(many["choices"][0]["text"], one["choices"][0]["text"]) << stop;
    EXPECT_EQ(many["usage"]["completion_tokens"], one["usage"]["completion_tokens"]) << stop;
    EXPECT_EQ(many["choices"][0]["logprobs"]["tokens"], one["choices"][0]["logprobs"]["tokens"])
        << stop;
    if (one["usage"]["completion_tokens"] < whole["usage"]["completion_tokens"]) {
      ++cut_inside_the_text;
    }
  }
  EXPECT_GT(cut_inside_the_text, 3);
  EXPECT_GT(spec.llm().stats().totals.spec_accepted_tokens, 0);
}

TEST(OpenAiServerTest, AFailedStreamEndsWithAnErrorEventAndHealthSaysSo) {
  Served served;
  const std::string out = call(served.port, "POST", "/v1/completions",
                               R"({"prompt": [5, 7, 255], "max_tokens": 4, "stream": true})");
  EXPECT_NE(out.find("HTTP/1.1 200"), std::string::npos) << out;
  const size_t error = out.find(R"(data: {"error":)");
  ASSERT_NE(error, std::string::npos) << out;
  EXPECT_NE(out.find("out of memory", error), std::string::npos) << out;
  EXPECT_NE(out.find("data: [DONE]", error), std::string::npos) << out;
  EXPECT_NE(call(served.port, "GET", "/health").find("HTTP/1.1 503"), std::string::npos);

  // Not streamed, the same failure is a 500 that names the cause and no source file.
  const std::string whole =
      call(served.port, "POST", "/v1/completions", R"({"prompt": [255], "max_tokens": 2})");
  EXPECT_NE(whole.find("HTTP/1.1 500"), std::string::npos) << whole;
  EXPECT_NE(whole.find("out of memory"), std::string::npos) << whole;
  EXPECT_EQ(whole.find(".cc"), std::string::npos) << whole;

  // A step that succeeds makes the server healthy again.
  const std::string ok =
      call(served.port, "POST", "/v1/completions", R"({"prompt": [5, 7], "max_tokens": 2})");
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
  EXPECT_NE(call(served.port, "GET", "/health").find("HTTP/1.1 200"), std::string::npos);
}

// One access-log line per request: method, route, status, latency and token counts, and never the
// prompt's text.
TEST(OpenAiServerTest, LogsOneLinePerRequestWithoutThePrompt) {
  std::ostringstream lines;
  auto logger = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines));
  logger->set_pattern("%l %v");
  const auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  {
    Served served;
    call(served.port, "POST", "/v1/completions",
         R"({"prompt": "secret words", "max_tokens": 3, "ignore_eos": true})");
    call(served.port, "GET", "/nowhere");
  }
  spdlog::set_default_logger(previous);
  const std::string log = lines.str();
  EXPECT_NE(log.find("info POST /v1/completions 200 "), std::string::npos) << log;
  EXPECT_NE(log.find(" ms prompt_tokens=12 completion_tokens=3\n"), std::string::npos) << log;
  EXPECT_NE(log.find("info GET /nowhere 404 "), std::string::npos) << log;
  EXPECT_EQ(log.find("secret"), std::string::npos) << log;
}

// Shutdown aborts what is still running once the grace period is over; each stream still ends
// with [DONE], and run() returns.
TEST(OpenAiServerTest, ShutdownEndsOpenStreamsProperly) {
  Served served;
  served.model().step_time = milliseconds(20);  // 50 tokens take a second
  std::string out;
  std::thread client([&] {
    out = call(served.port, "POST", "/v1/completions",
               R"({"prompt": [5, 7], "max_tokens": 50, "ignore_eos": true, "stream": true})");
  });
  // Wait until it runs.
  while (served.engine().metrics_text().find("\npagoda:num_requests_running 1") ==
         std::string::npos) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(served.server().shutdown(milliseconds(0)), 1);
  client.join();
  EXPECT_NE(out.find("data: [DONE]\n\n"), std::string::npos) << out.substr(0, 400);
  EXPECT_NE(out.rfind("0\r\n\r\n"), std::string::npos);  // the chunked stream's proper end
}

}  // namespace
}  // namespace pagoda
