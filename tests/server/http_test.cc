#include "server/http.h"

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <stdexcept>
#include <thread>

namespace pagoda::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

// Sets a flag when destroyed: stands for engine work an exchange holds.
struct Work {
  explicit Work(std::atomic<bool>& dropped) : dropped(dropped) {}
  ~Work() { dropped = true; }
  std::atomic<bool>& dropped;
};

// A server on a free loopback port, serving on its own thread, with routes to test against.
class TestServer {
 public:
  explicit TestServer(Limits limits = {.max_body_bytes = 1000,
                                       .max_header_bytes = 2000,
                                       .threads = 2})
      : server_(limits) {
    server_.route("POST", "/echo", [](const std::shared_ptr<Exchange>& exchange) {
      exchange->respond({.content_type = "text/plain", .body = exchange->request().body});
    });
    // Answers from another thread, as the engine's news does.
    server_.route("GET", "/later", [](const std::shared_ptr<Exchange>& exchange) {
      std::thread([exchange] {
        std::this_thread::sleep_for(milliseconds(50));
        exchange->post([exchange] {
          exchange->start_stream({.content_type = "text/plain"});
          exchange->write("one ");
          exchange->write("two");
          exchange->end_stream();
        });
      }).detach();
    });
    // Its answer's task throws, as a failure in the engine's news might.
    server_.route("GET", "/throws", [](const std::shared_ptr<Exchange>& exchange) {
      exchange->post([] { throw std::runtime_error("a task failed"); });
    });
    // Never answers; holds work until the client goes away.
    server_.route("GET", "/hold", [this](const std::shared_ptr<Exchange>& exchange) {
      exchange->hold(std::make_shared<Work>(held_dropped));
      held = true;
    });
    port = server_.bind("127.0.0.1", 0);
    thread_ = std::thread([this] { server_.run(); });
  }
  ~TestServer() {
    server_.stop();
    thread_.join();
  }
  Server& server() { return server_; }

  int port = 0;
  std::atomic<bool> held{false};
  std::atomic<bool> held_dropped{false};

 private:
  Server server_;
  std::thread thread_;
};

struct Client {
  explicit Client(int port) : socket(io) {
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  }
  // Sends what the server takes: one that refuses early may close before it has read all.
  void send(const std::string& bytes) {
    boost::system::error_code ignored;
    asio::write(socket, asio::buffer(bytes), ignored);
  }
  // Everything until the server closes the connection (or 5 s pass).
  std::string read_all() {
    std::string out;
    auto done = std::async(std::launch::async, [&] {
      boost::system::error_code error;
      char buffer[4096];
      while (true) {
        const size_t n = socket.read_some(asio::buffer(buffer), error);
        if (error) break;
        out.append(buffer, n);
      }
    });
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      socket.close();
      done.wait();
      ADD_FAILURE() << "the server did not close the connection";
    }
    return out;
  }
  asio::io_context io;
  tcp::socket socket;
};

std::string status_of(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

TEST(HttpServerTest, AnswersAndKeepsTheConnectionForPipelinedRequests) {
  TestServer server;
  Client client(server.port);
  client.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecond");
  const std::string out = client.read_all();
  EXPECT_EQ(status_of(out), "HTTP/1.1 200 OK");
  const size_t first = out.find("\r\n\r\nfirst");
  const size_t second = out.find("\r\n\r\nsecond");
  EXPECT_NE(first, std::string::npos) << out;
  EXPECT_NE(second, std::string::npos) << out;
  EXPECT_LT(first, second);
}

// The cap on output queued for a slow client is on what piles up behind it: a whole response sent
// at once goes out however long (a 70 MB one was cut after all the work to make it).
TEST(HttpServerTest, AWholeResponseLongerThanTheQueueCapGoesOut) {
  TestServer server(
      {.max_body_bytes = 1000, .max_header_bytes = 2000, .threads = 2, .max_pending_output = 100});
  Client client(server.port);
  const std::string body(600, 'b');
  client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 600\r\nConnection: close\r\n\r\n" +
              body);
  const std::string out = client.read_all();
  EXPECT_EQ(status_of(out), "HTTP/1.1 200 OK");
  EXPECT_NE(out.find("\r\n\r\n" + body), std::string::npos) << out.size();
}

// A posted task that throws answers 500 and ends only its exchange: the exception once left the
// I/O thread's run() and ended the process.
TEST(HttpServerTest, APostedTaskThatThrowsAnswers500) {
  TestServer server;
  Client failing(server.port);
  failing.send("GET /throws HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(failing.read_all()), "HTTP/1.1 500 Internal Server Error");
  Client next(server.port);
  next.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
  const std::string out = next.read_all();
  EXPECT_EQ(status_of(out), "HTTP/1.1 200 OK");
  EXPECT_NE(out.find("\r\n\r\nok"), std::string::npos) << out;
}

TEST(HttpServerTest, ReadsAChunkedBodyWithinTheLimit) {
  TestServer server;
  Client client(server.port);
  client.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  const std::string out = client.read_all();
  EXPECT_EQ(status_of(out), "HTTP/1.1 200 OK");
  EXPECT_NE(out.find("\r\n\r\nabcde"), std::string::npos) << out;
}

TEST(HttpServerTest, RefusesABodyOverTheLimitHoweverItIsSent) {
  TestServer server;
  const std::string piece(600, 'a');
  {
    Client client(server.port);
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1200\r\n\r\n" + piece + piece);
    EXPECT_EQ(status_of(client.read_all()), "HTTP/1.1 413 Payload Too Large");
  }
  {
    // Chunked: no length up front, so the limit has to hold as the chunks arrive.
    Client client(server.port);
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n" +
                piece + "\r\n258\r\n" + piece + "\r\n0\r\n\r\n");
    EXPECT_EQ(status_of(client.read_all()), "HTTP/1.1 413 Payload Too Large");
  }
  {
    // A chunk header whose extension never ends is held to the header limit.
    Client client(server.port);
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;" +
                std::string(200000, 'x'));
    EXPECT_EQ(status_of(client.read_all()), "HTTP/1.1 431 Request Header Fields Too Large");
  }
}

TEST(HttpServerTest, RefusesEncodedBodiesAndAmbiguousFraming) {
  TestServer server;
  const auto answer = [&](const std::string& request) {
    Client client(server.port);
    client.send(request);
    return status_of(client.read_all());
  };
  EXPECT_EQ(answer("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
                   "Content-Length: 2\r\n\r\nxx"),
            "HTTP/1.1 415 Unsupported Media Type");
  EXPECT_EQ(answer("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n2\r\nxx\r\n0\r\n\r\n"),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(
      answer("POST /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(3000, 'h') + "\r\n\r\n"),
      "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(answer("this is not HTTP\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(answer("GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 404 Not Found");
  EXPECT_EQ(answer("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 405 Method Not Allowed");
}

TEST(HttpServerTest, StreamsAnAnswerGivenLaterFromAnotherThread) {
  TestServer server;
  Client client(server.port);
  client.send("GET /later HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string out = client.read_all();
  EXPECT_EQ(status_of(out), "HTTP/1.1 200 OK");
  EXPECT_NE(out.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(out.find("4\r\none \r\n3\r\ntwo\r\n0\r\n\r\n"), std::string::npos) << out;
}

TEST(HttpServerTest, AClientThatGoesAwayDropsTheWorkItsExchangeHolds) {
  TestServer server;
  {
    Client client(server.port);
    client.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
    while (!server.held)
      std::this_thread::sleep_for(milliseconds(1));
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_FALSE(server.held_dropped);
  }  // the client closes its socket
  for (int i = 0; i < 500 && !server.held_dropped; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(server.held_dropped);
}

TEST(HttpServerTest, ServesHundredsOfConnectionsOpenedAtOnce) {
  TestServer server(
      {.max_body_bytes = 1000, .threads = 2, .backlog = 1024, .max_connections = 2000});
  constexpr int kClients = 300;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>(server.port));
  }
  for (auto& client : clients) {
    client->send(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
  }
  int answered = 0;
  for (auto& client : clients)
    answered += status_of(client->read_all()) == "HTTP/1.1 200 OK";
  EXPECT_EQ(answered, kClients);
}

TEST(HttpServerTest, BeyondMaxConnectionsAnswers503) {
  TestServer server({.max_body_bytes = 1000, .threads = 1, .max_connections = 2});
  Client first(server.port);
  Client second(server.port);
  // The server counts a connection once it has accepted it.
  for (int i = 0; i < 200 && server.server().open_connections() < 2; ++i)
    std::this_thread::sleep_for(milliseconds(5));
  Client third(server.port);
  EXPECT_EQ(status_of(third.read_all()), "HTTP/1.1 503 Service Unavailable");
}

TEST(HttpServerTest, DrainingClosesIdleConnectionsButNotAnswersInProgress) {
  TestServer server;
  Client idle(server.port);
  Client busy(server.port);
  busy.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  while (!server.held)
    std::this_thread::sleep_for(milliseconds(1));
  server.server().drain();
  EXPECT_EQ(idle.read_all(), "");  // closed without a word
  // New connections are no longer accepted; the held exchange keeps its connection.
  EXPECT_FALSE(server.held_dropped);
}

}  // namespace
}  // namespace pagoda::http
