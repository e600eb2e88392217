// The OpenAI-compatible HTTP API over an EngineService: /v1/completions and /v1/chat/completions
// (streamed as server-sent events or whole), /v1/models, /tokenize, /detokenize, /health and
// /metrics. Each handler thread turns its request into engine requests (one per prompt and choice)
// and reads their deltas; a client that goes away aborts its requests.
#pragma once

#include <memory>
#include <string>

#include "server/engine_service.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
}

namespace pagoda {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 1 << 20;
  int threads = 64;  // handler threads: each open stream holds one
};

class OpenAiServer {
 public:
  // `chat` may be null (the tokenizer has no chat template). Everything must outlive the server.
  OpenAiServer(EngineService& engine, const Tokenizer& tokenizer, const ChatTemplate* chat,
               RequestLimits limits, ServerOptions options);
  ~OpenAiServer();

  // Binds the address; returns the port. Error when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal handler's helper thread).
  void run();
  void stop();

 private:
  EngineService& engine_;
  const Tokenizer& tokenizer_;
  const ChatTemplate* chat_;
  RequestLimits limits_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
};

}  // namespace pagoda
