#include "server/http.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "server/http_parse.h"

namespace pagoda::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;

constexpr std::chrono::milliseconds kLinger{2000};

namespace {

std::string status_line(int status) {
  const beast::string_view reason =
      beast::http::obsolete_reason(static_cast<beast::http::status>(status));
  return fmt::format(
      "HTTP/1.1 {} {}\r\n", status,
      reason.empty() ? std::string_view("Status") : std::string_view(reason.data(), reason.size()));
}

Response plain_error(int status, const std::string& message) {
  return {.status = status, .content_type = "text/plain", .body = message + "\n"};
}

}  // namespace

std::string_view Request::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (iequals(key, name)) return value;
  }
  return {};
}

struct Server::State {
  explicit State(Limits limits) : limits(limits), acceptor(io) {}

  Limits limits;
  std::map<std::string, std::map<std::string, Handler>> routes;  // path → method → handler
  std::function<std::optional<Response>(const Request&)> guard;
  std::function<Response(int, const std::string&)> error_response = plain_error;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};
  mutable std::mutex mutex;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  // Last, so that it goes first: destroying it destroys the handlers it still queues, and with
  // them the sessions, which unregister themselves above.
  asio::io_context io;
  tcp::acceptor acceptor;

  void accept();
  // Runs `action` on every open connection's strand.
  void for_each_session(const std::function<void(const std::shared_ptr<Session>&)>& action);
};

// One connection: reads a request, hands it to its handler, writes the answer, and reads the next
// while the client keeps the connection. Everything runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::State* server)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()) {}

  ~Session() {
    std::lock_guard<std::mutex> lock(server_->mutex);
    server_->sessions.erase(this);
  }

  // `refuse`: answers 503 and closes (too many connections).
  void start(bool refuse) {
    {
      std::lock_guard<std::mutex> lock(server_->mutex);
      server_->sessions.emplace(this, weak_from_this());
    }
    asio::dispatch(socket_.get_executor(), [self = shared_from_this(), refuse] {
      if (refuse) {
        self->refuse(503, "the server has too many connections; try again later");
      } else {
        self->read_header();
      }
    });
  }

  void post(std::function<void()> task) { asio::post(socket_.get_executor(), std::move(task)); }

  // Closes the connection if no request is in progress (drain), or at once (`now`).
  void close(bool now) {
    if (now || !in_exchange_) close_socket();
  }

  // The Exchange's calls, on the strand; `id` names the exchange, and a stale one is ignored.
  void respond(uint64_t id, Response response) {
    if (id != exchange_id_ || gone_) return;
    status_ = response.status;
    std::string out = head(response, false);
    out += response.body;
    send(std::move(out));
    finish();
  }
  void start_stream(uint64_t id, const Response& head_response) {
    if (id != exchange_id_ || gone_) return;
    status_ = head_response.status;
    send(head(head_response, true));
  }
  void write(uint64_t id, std::string data) {
    if (id != exchange_id_ || gone_ || data.empty()) return;
    send(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
  }
  void end_stream(uint64_t id) {
    if (id != exchange_id_ || gone_) return;
    send("0\r\n\r\n");
    finish();
  }
  void hold(uint64_t id, std::shared_ptr<void> work) {
    if (id == exchange_id_ && !gone_ && in_exchange_) work_.push_back(std::move(work));
  }
  void set_log_note(uint64_t id, std::string note) {
    if (id == exchange_id_) log_note_ = std::move(note);
  }
  void post_for(uint64_t id, std::function<void()> task) {
    post([self = shared_from_this(), id, task = std::move(task)] {
      if (id != self->exchange_id_ || self->gone_) return;
      // A task that throws ends its exchange, not the I/O thread: an exception out of the I/O
      // context's run() would end the process.
      try {
        task();
      } catch (const std::exception& error) {
        spdlog::error("{} {}: {}", self->method_, self->path_, error.what());
        if (self->status_ == 0) {
          self->respond(id, self->server_->error_response(500, "internal server error"));
        } else {
          self->client_gone();  // an answer under way cannot be ended well: cut it
        }
      }
    });
  }

 private:
  const Limits& limits() const { return server_->limits; }

  std::string head(const Response& response, bool chunked) const {
    std::string out = status_line(response.status);
    out += fmt::format("Content-Type: {}\r\n", response.content_type);
    out += chunked ? std::string("Transfer-Encoding: chunked\r\n")
                   : fmt::format("Content-Length: {}\r\n", response.body.size());
    for (const auto& [name, value] : response.headers)
      out += fmt::format("{}: {}\r\n", name, value);
    out +=
        keep_alive_ && !server_->draining ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    out += "\r\n";
    return out;
  }

  // Reading -------------------------------------------------------------------------------------

  void read_header() {
    in_exchange_ = false;
    if (server_->draining && buffer_.size() == 0) {
      close_socket();
      return;
    }
    parser_.emplace();
    limit_parser(*parser_, limits());
    arm(limits().request_timeout);
    beast::http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](ErrorCode error, size_t) { self->on_header(error); });
  }

  void on_header(ErrorCode error) {
    if (gone_) return;
    in_exchange_ = true;
    if (error) {
      read_failed(error);
      return;
    }
    const auto& message = parser_->get();
    const std::string_view target(message.target().data(), message.target().size());
    method_ = std::string(message.method_string());
    path_ = std::string(target.substr(0, std::min<size_t>(target.find('?'), 200)));
    started_ = Clock::now();
    if (const auto refusal = refuse_head(message)) {
      refuse(refusal->status, refusal->message);
      return;
    }
    const auto expect = message[beast::http::field::expect];
    if (iequals(std::string_view(expect.data(), expect.size()), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue),
                        [self = shared_from_this()](ErrorCode error, size_t) {
                          if (error) {
                            self->client_gone();
                          } else {
                            self->read_body();
                          }
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    beast::http::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](ErrorCode error, size_t) { self->on_body(error); });
  }

  void on_body(ErrorCode error) {
    disarm();
    if (gone_) return;
    if (error) {
      read_failed(error);
      return;
    }
    dispatch();
  }

  // A request that could not be read: a clean end of the connection, or a refusal.
  void read_failed(ErrorCode error) {
    if (const auto refusal = refuse_read_error(error, limits())) {
      refuse(refusal->status, refusal->message);
    } else {
      close_socket();
    }
  }

  // Answers an error and closes: what remains of the request cannot be trusted.
  void refuse(int status, const std::string& message) {
    in_exchange_ = true;
    keep_alive_ = false;
    ++exchange_id_;
    if (!parser_ || !parser_->is_header_done()) {
      method_ = "-";
      path_ = "-";
      started_ = Clock::now();
    }
    respond(exchange_id_, server_->error_response(status, message));
  }

  void dispatch() {
    keep_alive_ = parser_->get().keep_alive();
    Request request = take_request(*parser_);
    parser_.reset();
    log_note_.clear();
    status_ = 0;  // nothing of the answer sent yet
    const uint64_t id = ++exchange_id_;
    auto exchange = std::make_shared<Exchange>(weak_from_this(), id, std::move(request));

    std::optional<Response> refusal;
    const auto route = server_->routes.find(exchange->request().path);
    if (server_->draining) {
      keep_alive_ = false;
      refusal = server_->error_response(503, "the server is shutting down");
    } else if (route == server_->routes.end()) {
      refusal = server_->error_response(404, fmt::format("no route {} {}", method_, path_));
    } else if (route->second.count(method_) == 0) {
      refusal = server_->error_response(405, fmt::format("{} does not take {}", path_, method_));
    } else if (server_->guard) {
      refusal = server_->guard(exchange->request());
    }
    if (refusal) {
      exchange->respond(std::move(*refusal));
      return;
    }
    try {
      route->second.at(method_)(exchange);
    } catch (const std::exception& error) {
      spdlog::error("{} {}: {}", method_, path_, error.what());
      exchange->respond(server_->error_response(500, "internal server error"));
    }
    if (!done_) watch();
  }

  // While an answer is pending, a read on the connection notices a client that goes away. Bytes
  // that arrive meanwhile (the next request) stay in the buffer for the next read.
  void watch() {
    if (watching_ || gone_ || buffer_.size() >= limits().max_header_bytes) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](ErrorCode error, size_t bytes) {
                              self->on_watch(error, bytes);
                            });
  }

  void on_watch(ErrorCode error, size_t bytes) {
    watching_ = false;
    if (gone_) return;
    if (lingering_) {
      if (error) {
        close_socket();
      } else {
        buffer_.clear();
        watch();
      }
      return;
    }
    if (error) {
      client_gone();
      return;
    }
    buffer_.commit(bytes);
    if (done_) {
      maybe_next();
    } else {
      watch();
    }
  }

  // Writing -------------------------------------------------------------------------------------

  void send(std::string bytes) {
    // The cap is on output that piles up behind a client that does not read: a piece sent when
    // nothing waits (a whole response, however long) always goes out.
    const bool waiting = writing_ || !out_.empty();
    queued_bytes_ += bytes.size();
    if (waiting && queued_bytes_ > limits().max_pending_output) {
      spdlog::warn("{} {}: the client reads too slowly; closing", method_, path_);
      client_gone();
      return;
    }
    out_.push_back(std::move(bytes));
    flush();
  }

  void flush() {
    if (writing_ || out_.empty() || gone_) return;
    writing_ = true;
    auto batch = std::make_shared<std::string>();
    for (std::string& piece : out_)
      *batch += piece;
    out_.clear();
    queued_bytes_ = 0;
    arm(limits().write_timeout);
    asio::async_write(socket_, asio::buffer(*batch),
                      [self = shared_from_this(), batch](ErrorCode error, size_t) {
                        self->writing_ = false;
                        self->disarm();
                        if (error) {
                          self->client_gone();
                          return;
                        }
                        self->flush();
                        self->maybe_next();
                      });
  }

  // The exchange is answered (its bytes are queued).
  void finish() {
    if (done_) return;
    done_ = true;
    work_.clear();
    log_line(std::to_string(status_));
  }

  void log_line(const std::string& outcome) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
    spdlog::info("{} {} {} {:.1f} ms{}{}", method_, path_, outcome, ms,
                 log_note_.empty() ? "" : " ", log_note_);
  }

  // After an answer: the next request, or the end of the connection.
  void maybe_next() {
    if (gone_ || !done_ || writing_ || !out_.empty()) return;
    if (!keep_alive_ || server_->draining) {
      // Closing with unread bytes would reset the connection and could lose the answer (a refused
      // body still arriving, say): end the sending side, then read and drop until the client
      // closes, for a short while.
      ErrorCode ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      lingering_ = true;
      in_exchange_ = false;
      buffer_.clear();
      arm(kLinger);
      watch();
      return;
    }
    if (watching_) {
      // The watching read becomes the next request's first bytes; until then the idle limit holds.
      in_exchange_ = false;
      arm(limits().request_timeout);
      return;
    }
    done_ = false;
    read_header();
  }

  void client_gone() {
    if (gone_) return;
    if (in_exchange_ && !done_) log_line("client gone");
    close_socket();
  }

  void close_socket() {
    gone_ = true;
    ErrorCode ignored;
    socket_.close(ignored);
    timer_.cancel();
    out_.clear();
    work_.clear();  // whatever served the request (engine work) is dropped, which aborts it
  }

  // One timer bounds the current read of a request or write of an answer.
  void arm(std::chrono::milliseconds timeout) {
    const uint64_t generation = ++timer_generation_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), generation](ErrorCode error) {
      if (error || generation != self->timer_generation_ || self->gone_) return;
      if (self->in_exchange_ && !self->done_) self->log_line("timed out");
      self->close_socket();
    });
  }
  void disarm() {
    ++timer_generation_;
    timer_.cancel();
  }

  Server::State* server_;  // outlives every session (see State::io)
  tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  // Bytes received and not yet parsed, bounded.
  beast::flat_buffer buffer_{unparsed_limit(server_->limits)};
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;

  uint64_t exchange_id_ = 0;
  bool in_exchange_ = false;  // a request is being read or answered
  bool done_ = false;         // the current exchange is answered
  bool keep_alive_ = true;
  bool watching_ = false;
  bool writing_ = false;
  bool gone_ = false;       // the socket is closed
  bool lingering_ = false;  // answered and closing: reading only to drop what still arrives
  std::deque<std::string> out_;
  size_t queued_bytes_ = 0;
  std::vector<std::shared_ptr<void>> work_;

  // For the access log.
  std::string method_;
  std::string path_;
  int status_ = 0;
  std::string log_note_;
  Clock::time_point started_;
};

// Exchange ----------------------------------------------------------------------------------------

Exchange::Exchange(std::weak_ptr<Session> session, uint64_t id, Request request)
    : session_(std::move(session)), id_(id), request_(std::move(request)) {}

void Exchange::respond(Response response) {
  if (answered_) return;
  answered_ = true;
  if (auto session = session_.lock()) session->respond(id_, std::move(response));
}

void Exchange::start_stream(const Response& head) {
  if (answered_ || streaming_) return;
  streaming_ = true;
  if (auto session = session_.lock()) session->start_stream(id_, head);
}

void Exchange::write(std::string data) {
  if (answered_ || !streaming_) return;
  if (auto session = session_.lock()) session->write(id_, std::move(data));
}

void Exchange::end_stream() {
  if (answered_ || !streaming_) return;
  answered_ = true;
  if (auto session = session_.lock()) session->end_stream(id_);
}

void Exchange::post(std::function<void()> task) {
  if (auto session = session_.lock()) session->post_for(id_, std::move(task));
}

void Exchange::hold(std::shared_ptr<void> work) {
  if (auto session = session_.lock()) session->hold(id_, std::move(work));
}

void Exchange::set_log_note(std::string note) {
  if (auto session = session_.lock()) session->set_log_note(id_, std::move(note));
}

// Server ------------------------------------------------------------------------------------------

void Server::State::accept() {
  acceptor.async_accept(asio::make_strand(io), [this](ErrorCode error, tcp::socket socket) {
    if (error == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (error) {
      // Out of file descriptors, say: wait a little rather than spin.
      spdlog::warn("accepting a connection failed: {}", error.message());
      auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
      timer->async_wait([this, timer](ErrorCode) {
        if (acceptor.is_open()) accept();
      });
      return;
    }
    ErrorCode ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    size_t open = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      open = sessions.size();
    }
    const bool refuse = open >= static_cast<size_t>(limits.max_connections);
    std::make_shared<Session>(std::move(socket), this)->start(refuse);
    accept();
  });
}

void Server::State::for_each_session(
    const std::function<void(const std::shared_ptr<Session>&)>& action) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [raw, weak] : sessions) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  for (const auto& session : live)
    action(session);
}

Server::Server(Limits limits) : state_(std::make_shared<State>(limits)) {
  // spdlog builds its registry and default logger on first use. Built here, on the thread that
  // makes the server, it exists before any I/O thread starts, which then only reads it: a first
  // use from two I/O threads at once synchronises inside libspdlog, where ThreadSanitizer cannot
  // see it and reports a race.
  spdlog::default_logger_raw();
}

Server::~Server() {
  stop();
}

void Server::route(std::string method, std::string path, Handler handler) {
  state_->routes[std::move(path)][std::move(method)] = std::move(handler);
}

void Server::set_guard(std::function<std::optional<Response>(const Request&)> guard) {
  state_->guard = std::move(guard);
}

void Server::set_error_response(std::function<Response(int, const std::string&)> make) {
  state_->error_response = std::move(make);
}

int Server::bind(const std::string& host, int port) {
  ErrorCode error;
  const auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, error);
  if (error) fail("cannot listen on '{}': not an IP address", host);
  tcp::acceptor& acceptor = state_->acceptor;
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(state_->limits.backlog, error);
  if (error) {
    ErrorCode ignored;
    acceptor.close(ignored);
    fail("cannot bind to {}:{} ({}: in use, or not an address of this machine)", host, port,
         error.message());
  }
  return acceptor.local_endpoint().port();
}

void Server::run() {
  PAGODA_CHECK(state_->acceptor.is_open(), "run() before bind()");
  state_->accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(state_->limits.threads, 1); ++i)
    threads.emplace_back([this] { state_->io.run(); });
  state_->io.run();
  for (std::thread& thread : threads)
    thread.join();
}

void Server::drain() {
  if (state_->draining.exchange(true)) return;
  asio::post(state_->io, [state = state_.get()] {
    ErrorCode ignored;
    state->acceptor.close(ignored);
  });
  state_->for_each_session([](const std::shared_ptr<Session>& session) {
    session->post([session] { session->close(false); });
  });
}

void Server::stop() {
  if (state_->stopping.exchange(true)) return;
  drain();
  state_->for_each_session([](const std::shared_ptr<Session>& session) {
    session->post([session] { session->close(true); });
  });
  // The closes run first; then every thread leaves run(), whatever is still queued.
  auto timer = std::make_shared<asio::steady_timer>(state_->io, std::chrono::milliseconds(100));
  timer->async_wait([state = state_.get(), timer](ErrorCode) { state->io.stop(); });
}

int64_t Server::open_connections() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return static_cast<int64_t>(state_->sessions.size());
}

}  // namespace pagoda::http
