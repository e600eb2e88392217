#include "server/openai_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <thread>

#include "core/error.h"
#include "core/files.h"
#include "server/openai_call.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;

// How long shutdown waits for aborted calls to end, and then for their answers to go out.
constexpr std::chrono::seconds kFlushTime{3};

std::string error_type(int status) {
  switch (status) {
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "invalid_request_error";
  }
}

Json error_body(const std::string& message, const std::string& type, const std::string& param,
                int status) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? Json() : Json(param)},
            {"code", status}}}};
}

http::Response error_response(int status, const std::string& message, const std::string& type = "",
                              const std::string& param = "") {
  return {.status = status,
          .body = json_dump(
              error_body(message, type.empty() ? error_type(status) : type, param, status))};
}

http::Response json_response(const Json& body) {
  return {.body = json_dump(body)};
}

std::string sse(const Json& chunk) {
  return "data: " + json_dump(chunk) + "\n\n";
}

// Whether `given` equals `secret`, in a time that depends only on their lengths, so that timing
// a wrong key reveals nothing of the right one.
bool same_secret(std::string_view given, std::string_view secret) {
  if (given.size() != secret.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < secret.size(); ++i)
    differ |= static_cast<unsigned char>(given[i] ^ secret[i]);
  return differ == 0;
}

Json parse_body(const http::Request& request) {
  try {
    return parse_json_text<Json>(request.body, "the body");
  } catch (const Error& error) {
    throw ApiError(400, error.what());
  }
}

// A handler whose refusals (ApiError, Error) become OpenAI error responses.
template <typename Body>
http::Handler guarded(Body body) {
  return [body](const std::shared_ptr<http::Exchange>& exchange) {
    try {
      body(*exchange);
    } catch (const ApiError& error) {
      exchange->respond(error_response(error.status, error.what(), error.type, error.param));
    } catch (const Error& error) {
      exchange->respond(error_response(400, error.what()));
    }
  };
}

}  // namespace

// One completion or chat call bound to its exchange. The exchange holds it, so a client that goes
// away destroys it, which aborts its engine requests. Everything but the engine's notification
// runs on the exchange's strand.
class OpenAiServer::Call : public std::enable_shared_from_this<Call> {
 public:
  Call(OpenAiServer& server, std::shared_ptr<http::Exchange> exchange, OpenAiRequest request)
      : server_(server),
        exchange_(std::move(exchange)),
        stream_(request.stream),
        call_(server.engine_, server.tokenizer_, std::move(request),
              server.limits_.served_model_name) {}

  ~Call() {
    std::lock_guard<std::mutex> lock(server_.calls_mutex_);
    server_.calls_.erase(this);
    server_.calls_changed_.notify_all();
  }

  void start() {
    // The engine thread only posts, and only when no pump is already on its way: a step brings
    // news for every choice at once. It never touches the call itself.
    std::weak_ptr<http::Exchange> exchange = exchange_;
    std::weak_ptr<Call> self = weak_from_this();
    call_.submit([exchange, self, scheduled = pump_scheduled_] {
      if (scheduled->exchange(true)) return;
      if (auto alive = exchange.lock()) {
        alive->post([self] {
          if (auto call = self.lock()) call->pump();
        });
      }
    });
    {
      std::lock_guard<std::mutex> lock(server_.calls_mutex_);
      server_.calls_.emplace(this, self);
    }
    exchange_->hold(shared_from_this());
    if (stream_) {
      exchange_->start_stream(
          {.content_type = "text/event-stream", .headers = {{"Cache-Control", "no-cache"}}});
    }
    pump();
  }

  // The engine thread no longer posts for this call (the server is going away).
  void stop_notifications() { call_.stop_notifications(); }

  // Ends the call now: its unfinished choices are aborted and the answer goes out. Any thread.
  void abort() {
    exchange_->post([self = weak_from_this()] {
      if (auto call = self.lock()) {
        call->call_.abort_unfinished();
        call->pump();
      }
    });
  }

 private:
  // Sends what the engine has produced; once every choice has finished, the end of the answer.
  void pump() {
    pump_scheduled_->store(false);
    if (answered_) return;
    for (const Json& chunk : call_.poll()) {
      if (stream_) exchange_->write(sse(chunk));
    }
    if (!call_.finished()) return;
    answered_ = true;
    const Json usage = call_.usage_chunk()["usage"];
    exchange_->set_log_note(fmt::format("prompt_tokens={} completion_tokens={}",
                                        usage["prompt_tokens"].get<int64_t>(),
                                        usage["completion_tokens"].get<int64_t>()));
    const std::string& error = call_.error();
    if (!stream_) {
      exchange_->respond(error.empty() ? json_response(call_.response())
                                       : error_response(500, error));
      return;
    }
    std::string tail;
    // A stream that failed says so before it ends, so that a client does not take it as whole.
    if (!error.empty()) tail += sse(error_body(error, error_type(500), "", 500));
    if (call_.wants_usage()) tail += sse(call_.usage_chunk());
    tail += "data: [DONE]\n\n";
    exchange_->write(std::move(tail));
    exchange_->end_stream();
  }

  OpenAiServer& server_;
  std::shared_ptr<http::Exchange> exchange_;
  bool stream_;
  OpenAiCall call_;
  bool answered_ = false;
  std::shared_ptr<std::atomic<bool>> pump_scheduled_ = std::make_shared<std::atomic<bool>>(false);
};

OpenAiServer::OpenAiServer(EngineService& engine, const Tokenizer& tokenizer,
                           const ChatTemplate* chat, RequestLimits limits, ServerOptions options)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_(chat),
      limits_(std::move(limits)),
      options_(std::move(options)),
      http_(std::make_unique<http::Server>(
          http::Limits{.max_body_bytes = options_.max_body_bytes,
                       .threads = options_.threads,
                       .max_connections = options_.max_connections})) {
  http::Server& http = *http_;
  http.set_error_response(
      [](int status, const std::string& message) { return error_response(status, message); });
  // API keys guard the /v1 routes, as vLLM does.
  http.set_guard([this](const http::Request& request) -> std::optional<http::Response> {
    if (options_.api_key.empty() || request.path.rfind("/v1/", 0) != 0) return std::nullopt;
    if (same_secret(request.header("Authorization"), "Bearer " + options_.api_key)) {
      return std::nullopt;
    }
    return error_response(401, "missing or wrong API key (Authorization: Bearer ...)");
  });

  http.route("GET", "/health", [this](const std::shared_ptr<http::Exchange>& exchange) {
    if (engine_.healthy()) {
      exchange->respond({.content_type = "text/plain"});
    } else {
      exchange->respond(error_response(503, "the engine is failing; see the server log"));
    }
  });
  http.route("GET", "/metrics", [this](const std::shared_ptr<http::Exchange>& exchange) {
    exchange->respond(
        {.content_type = "text/plain; version=0.0.4", .body = engine_.metrics_text()});
  });
  http.route("GET", "/v1/models", [this](const std::shared_ptr<http::Exchange>& exchange) {
    exchange->respond(
        json_response({{"object", "list"},
                       {"data", Json::array({{{"id", limits_.served_model_name},
                                              {"object", "model"},
                                              {"created", 0},
                                              {"owned_by", "pagoda"},
                                              {"max_model_len", limits_.max_model_len}}})}}));
  });
  http.route(
      "POST", "/tokenize", guarded([this](http::Exchange& exchange) {
        const std::vector<int32_t> ids =
            parse_tokenize_request(parse_body(exchange.request()), tokenizer_, chat_);
        exchange.respond(json_response(
            {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", limits_.max_model_len}}));
      }));
  http.route("POST", "/detokenize", guarded([this](http::Exchange& exchange) {
               const std::vector<int32_t> ids =
                   parse_detokenize_request(parse_body(exchange.request()), tokenizer_);
               exchange.respond(json_response({{"prompt", tokenizer_.decode(ids)}}));
             }));

  const auto completion_route = [this](Endpoint endpoint) {
    return [this, endpoint](const std::shared_ptr<http::Exchange>& exchange) {
      guarded([&](http::Exchange&) {
        OpenAiRequest parsed = parse_openai_request(parse_body(exchange->request()), endpoint,
                                                    tokenizer_, chat_, limits_);
        std::make_shared<Call>(*this, exchange, std::move(parsed))->start();
      })(exchange);
    };
  };
  http.route("POST", "/v1/completions", completion_route(Endpoint::kCompletions));
  http.route("POST", "/v1/chat/completions", completion_route(Endpoint::kChatCompletions));
}

OpenAiServer::~OpenAiServer() {
  http_->stop();
  // The engine outlives the server and may still deliver to calls whose connections are about to
  // be destroyed with the I/O context: stop its notifications first. run() has returned by now.
  for (const auto& call : calls_in_flight())
    call->stop_notifications();
}

int OpenAiServer::bind() {
  options_.port = http_->bind(options_.host, options_.port);
  return options_.port;
}

void OpenAiServer::run() {
  http_->run();
}

std::vector<std::shared_ptr<OpenAiServer::Call>> OpenAiServer::calls_in_flight() {
  std::lock_guard<std::mutex> lock(calls_mutex_);
  std::vector<std::shared_ptr<Call>> calls;
  for (const auto& [raw, weak] : calls_) {
    if (auto call = weak.lock()) calls.push_back(std::move(call));
  }
  return calls;
}

bool OpenAiServer::wait_for_calls(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(calls_mutex_);
  return calls_changed_.wait_until(lock, deadline, [&] { return calls_.empty(); });
}

int64_t OpenAiServer::shutdown(milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  http_->drain();
  int64_t aborted = 0;
  if (!wait_for_calls(Clock::now() + grace)) {
    for (const auto& call : calls_in_flight()) {
      call->abort();
      ++aborted;
    }
    wait_for_calls(Clock::now() + kFlushTime);
  }
  // The last answers still have to reach their clients, which then close their connections.
  const auto deadline = Clock::now() + kFlushTime;
  while (http_->open_connections() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  http_->stop();
  return aborted;
}

void OpenAiServer::stop() {
  http_->stop();
}

}  // namespace pagoda
