// The OpenAI-compatible HTTP API over an EngineService: /v1/completions and /v1/chat/completions
// (streamed as server-sent events or whole), /v1/models, /tokenize, /detokenize, /health and
// /metrics, on the event-driven server of http.h. A call waits for the engine without holding a
// thread: the engine's news is posted to the call's connection, and a client that goes away
// aborts its requests, streaming or not.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/engine_service.h"
#include "server/http.h"
#include "server/openai_request.h"

namespace pagoda {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 1 << 20;
  int threads = 4;  // I/O threads, however many clients
  int max_connections = 8192;
};

class OpenAiServer {
 public:
  // `chat` may be null (the tokenizer has no chat template). Everything must outlive the server.
  OpenAiServer(EngineService& engine, const Tokenizer& tokenizer, const ChatTemplate* chat,
               RequestLimits limits, ServerOptions options);
  ~OpenAiServer();

  // Binds the address; returns the port. Error when it cannot.
  int bind();
  // Serves until stop() or the end of shutdown(), called from another thread.
  void run();
  // Stops taking requests, gives the calls in flight up to `grace` to finish, aborts the rest
  // (their streams still end with [DONE]), then stops. Returns how many it aborted.
  int64_t shutdown(std::chrono::milliseconds grace);
  void stop();

 private:
  class Call;

  std::vector<std::shared_ptr<Call>> calls_in_flight();
  // Waits until no call is in flight or `deadline` passes; returns whether none is.
  bool wait_for_calls(std::chrono::steady_clock::time_point deadline);

  EngineService& engine_;
  const Tokenizer& tokenizer_;
  const ChatTemplate* chat_;
  RequestLimits limits_;
  ServerOptions options_;
  std::mutex calls_mutex_;
  std::condition_variable calls_changed_;
  std::unordered_map<Call*, std::weak_ptr<Call>> calls_;
  std::unique_ptr<http::Server> http_;  // last: stopped and destroyed before the rest
};

}  // namespace pagoda
