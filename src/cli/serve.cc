#include "cli/serve.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli/engine_flags.h"
#include "cli/prompts.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/llm.h"
#include "server/openai_server.h"

namespace pagoda {
namespace {

struct ServeOptions {
  std::string served_model_name;
  int64_t max_choices = RequestLimits{}.max_choices;
  double shutdown_grace_s = 30;
  std::string log_level = "info";
  ServerOptions server;
  EngineOptions engine;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Log lines (the access log, engine failures) go to stderr at `level` and above.
void set_up_logging(const std::string& level) {
  auto logger = spdlog::get("pagoda");
  if (!logger) logger = spdlog::stderr_logger_mt("pagoda");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(std::move(logger));
}

// SIGINT and SIGTERM reach a thread that shuts the server down through a pipe: a handler may run
// on any thread (libraries start threads before main can mask signals), and writing a byte is
// safe in it.
int g_stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int signal) {
  const char byte = static_cast<char>(signal);
  [[maybe_unused]] const ssize_t written = write(g_stop_pipe[1], &byte, 1);
}

void run_serve(const ServeOptions& options) {
  // Written so that NaN fails too (CLI11's range check lets it through).
  if (!(options.shutdown_grace_s >= 0.0 && options.shutdown_grace_s <= 3600.0)) {
    fail("--shutdown-grace {}: it must be in [0, 3600]", options.shutdown_grace_s);
  }
  set_up_logging(options.log_level);
  if (options.server.api_key.empty() && !is_loopback(options.server.host)) {
    fmt::print(stderr,
               "warning: listening on {} without an API key: anyone who can reach it can use "
               "the model (set --api-key or PAGODA_API_KEY)\n",
               options.server.host);
  }
  // Serving needs text: a missing or bad tokenizer fails before the weights load.
  const std::string tokenizer_dir = options.engine.paths.tokenizer();
  if (!path_exists(tokenizer_dir + "/tokenizer.json")) {
    fail("serve needs a tokenizer, and '{}' has no tokenizer.json (give --tokenizer)",
         tokenizer_dir);
  }
  const std::unique_ptr<Llm> llm = Llm::load(options.engine);
  const std::string& model_dir = llm->model_dir();
  const KvCachePlan& plan = llm->plan();
  EngineService& engine = llm->service();
  const Tokenizer& tokenizer = *llm->tokenizer();
  const ChatTemplate* chat = llm->chat_template();

  RequestLimits limits{
      .served_model_name = options.served_model_name.empty()
                               ? std::filesystem::path(model_dir).filename().string()
                               : options.served_model_name,
      .max_model_len = plan.max_model_len,
      .max_choices = options.max_choices,
      .generation = llm->config().generation};
  OpenAiServer server(engine, tokenizer, chat, limits, options.server);

  // From here SIGINT and SIGTERM shut the server down gracefully (while the model loads they still
  // end the process at once); a zero byte (run() returned by itself) only ends the waiter.
  if (pipe(g_stop_pipe) != 0) fail("cannot create a pipe: {}", strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const int port = server.bind();
  fmt::print(stderr, "pagoda serve: model '{}' ({} KV blocks), listening on http://{}:{}\n",
             limits.served_model_name, plan.num_blocks - kNullBlocks, options.server.host, port);
  std::thread waiter([&] {
    char signal = 0;
    while (read(g_stop_pipe[0], &signal, 1) < 0 && errno == EINTR) {
    }
    if (signal == 0) return;
    spdlog::info("{}: shutting down (grace {} s)", strsignal(static_cast<unsigned char>(signal)),
                 options.shutdown_grace_s);
    const auto grace =
        std::chrono::milliseconds(static_cast<int64_t>(options.shutdown_grace_s * 1000));
    const int64_t aborted = server.shutdown(grace);
    if (aborted > 0) spdlog::warn("aborted {} calls still running after the grace period", aborted);
  });
  server.run();
  const char done = 0;
  [[maybe_unused]] const ssize_t written = write(g_stop_pipe[1], &done, 1);
  waiter.join();
  spdlog::info("stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* command = app.add_subcommand("serve", "Serve the OpenAI API over HTTP");
  add_model_flags(*command, options->engine.paths);
  add_chat_template_flag(*command, options->engine.paths);
  command->add_option("--host", options->server.host, "Address to listen on")
      ->capture_default_str();
  command->add_option("--port", options->server.port, "Port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command
      ->add_option("--api-key", options->server.api_key,
                   "Require 'Authorization: Bearer KEY' on /v1 routes (default: $PAGODA_API_KEY, "
                   "which keeps the key out of the process list)")
      ->envname("PAGODA_API_KEY");
  command
      ->add_option("--max-request-choices", options->max_choices,
                   "Most engine requests one call may start: prompts × n")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  command->add_option("--served-model-name", options->served_model_name,
                      "The model's name in the API (default: the model directory's name)");
  command
      ->add_option("--max-body-bytes", options->server.max_body_bytes,
                   "Largest request body accepted")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  command
      ->add_option("--http-threads", options->server.threads,
                   "Threads serving connections (any number of clients)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  command
      ->add_option("--max-connections", options->server.max_connections,
                   "Open connections at most; more are answered 503")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command
      ->add_option("--shutdown-grace", options->shutdown_grace_s,
                   "Seconds that SIGTERM or SIGINT lets running requests finish before aborting "
                   "them")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  command->add_option("--log-level", options->log_level, "Least severity logged")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  add_engine_flags(*command, options->engine);
  command->callback([options] { run_serve(*options); });
}

}  // namespace pagoda
