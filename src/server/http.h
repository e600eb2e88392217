// An event-driven HTTP/1.1 server on Boost.Asio and Beast: a few I/O threads serve every
// connection, so an open stream costs a socket and a little memory, not a thread. Limits hold for
// every way a body can arrive: headers and bodies are bounded as they are read (chunked ones too),
// a body in any content encoding but identity is refused (415), and so is a request carrying both
// Content-Length and chunked transfer encoding (400). Slow or silent clients time out.
//
// A handler gets an Exchange and may answer at once or later: whole (respond) or as a chunked
// stream (start_stream, write, end_stream). Every call on an Exchange happens on its connection's
// strand: in the handler itself, or in a task given to Exchange::post, which any thread may call.
// While an answer is pending the server watches the connection, and a client that goes away drops
// the work the exchange holds (Exchange::hold), which is how a request's engine work is aborted.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::http {

struct Request {
  std::string method;  // as sent: "GET", "POST", ...
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The first header named `name` (any case); empty when there is none.
  std::string_view header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class Session;

// One request being answered.
class Exchange {
 public:
  Exchange(std::weak_ptr<Session> session, uint64_t id, Request request);
  const Request& request() const { return request_; }

  // Answers whole. Once answered (or once the stream has ended) later calls do nothing.
  void respond(Response response);
  // Starts a chunked answer with `head`'s status, content type and headers (not its body).
  void start_stream(const Response& head);
  void write(std::string data);
  void end_stream();
  // Runs `task` on the connection's strand, unless the connection is gone by then; any thread.
  void post(std::function<void()> task);
  // Keeps `work` until the exchange ends, or the client goes away (which drops it at once).
  void hold(std::shared_ptr<void> work);
  // Words the access-log line ends with (e.g. token counts).
  void set_log_note(std::string note);

 private:
  std::weak_ptr<Session> session_;
  uint64_t id_;  // which of its connection's exchanges
  Request request_;
  bool answered_ = false;
  bool streaming_ = false;
};

using Handler = std::function<void(const std::shared_ptr<Exchange>&)>;

struct Limits {
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 64 << 10;
  int threads = 4;             // I/O threads
  int backlog = 4096;          // the listening socket's queue (the kernel may cap it lower)
  int max_connections = 8192;  // more are answered 503 and closed
  std::chrono::milliseconds request_timeout{30000};  // to receive a request, once begun or idle
  std::chrono::milliseconds write_timeout{60000};    // for one write to drain to the client
  size_t max_pending_output = 64 << 20;              // bytes queued for a client that does not read
};

class Server {
 public:
  explicit Server(Limits limits);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Routes are exact paths. Set them before run().
  void route(std::string method, std::string path, Handler handler);
  // Runs before every routed handler; returning a response answers the request with it instead
  // (e.g. a missing API key).
  void set_guard(std::function<std::optional<Response>(const Request&)> guard);
  // Builds the answer to a request refused before any handler (404, 405, 413, 503, ...).
  void set_error_response(std::function<Response(int status, const std::string& message)> make);

  // Binds and listens; returns the port (the one chosen when `port` is 0). Error when it cannot.
  int bind(const std::string& host, int port);
  // Serves on Limits::threads threads until stop(); returns once they have all finished.
  void run();
  // Stops accepting and closes idle connections; requests that arrive later on open connections
  // are answered 503. Answers in progress go on. Any thread.
  void drain();
  // Closes every connection and makes run() return. Any thread.
  void stop();
  int64_t open_connections() const;

 private:
  friend class Session;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace pagoda::http
