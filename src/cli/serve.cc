#include "cli/serve.h"

#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "cli/engine_flags.h"
#include "cli/prompts.h"
#include "core/error.h"
#include "server/http_server.h"

namespace pagoda {
namespace {

struct ServeOptions {
  ModelFlags paths;
  std::string served_model_name;
  int64_t max_choices = RequestLimits{}.max_choices;
  ServerOptions server;
  EngineFlags engine;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

void run_serve(const ServeOptions& options) {
  // SIGINT and SIGTERM are blocked before any thread starts (the engine's, the model's pools), so
  // every thread inherits the mask and only the waiter below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (options.server.api_key.empty() && !is_loopback(options.server.host)) {
    fmt::print(stderr,
               "warning: listening on {} without an API key: anyone who can reach it can use "
               "the model (set --api-key or PAGODA_API_KEY)\n",
               options.server.host);
  }
  const std::string model_dir = options.paths.model();
  const Tokenizer tokenizer = Tokenizer::load(options.paths.tokenizer());
  std::unique_ptr<ChatTemplate> chat;
  if (!tokenizer.chat_template().empty()) chat = std::make_unique<ChatTemplate>(tokenizer);

  const ModelConfig config = load_model_config(model_dir);
  const Device device = engine_device(options.engine);
  CacheConfig cache_config = engine_cache_config(options.engine, config);
  // A server needs room for many sequences. Without a budget: on the CPU, 512 MiB; on a GPU, what
  // --gpu-memory-utilization leaves once the model is loaded.
  const bool budgeted = cache_config.memory_bytes || cache_config.num_blocks;
  if (device.is_cpu() && !budgeted) cache_config.memory_bytes = int64_t{512} << 20;
  KvCachePlan plan = plan_cache(config, nullptr, cache_config);  // bad flags fail before loading
  std::unique_ptr<CausalLm> model = load_model(config, model_dir, options.engine);
  if (!device.is_cpu() && !budgeted) {
    cache_config.memory_bytes = gpu_kv_cache_budget(device, options.engine.gpu_memory_utilization);
    plan = plan_cache(config, nullptr, cache_config);
  }
  const KvCache cache = allocate_kv_cache(plan, device);
  EngineService engine(*model, plan, cache, engine_config(config, plan, options.engine));

  RequestLimits limits{
      .served_model_name = options.served_model_name.empty()
                               ? std::filesystem::path(model_dir).filename().string()
                               : options.served_model_name,
      .max_model_len = plan.max_model_len,
      .max_choices = options.max_choices};
  ServerOptions server_options = options.server;
  // Every open stream holds a handler thread: enough for a full batch, plus a few for the rest.
  server_options.threads = static_cast<int>(options.engine.scheduler.max_num_seqs) + 16;
  OpenAiServer server(engine, tokenizer, chat.get(), limits, server_options);

  // SIGINT and SIGTERM stop the server from a thread that waits for them.
  const int port = server.bind();
  fmt::print(stderr, "pagoda serve: model '{}' ({} KV blocks), listening on http://{}:{}\n",
             limits.served_model_name, plan.num_blocks - kNullBlocks, options.server.host, port);
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    server.stop();
  });
  server.run();
  // run() also returns when listening fails; wake the waiter so it can be joined.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* command = app.add_subcommand("serve", "Serve the OpenAI API over HTTP");
  add_model_flags(*command, options->paths);
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
      ->capture_default_str();
  add_engine_flags(*command, options->engine);
  command->callback([options] { run_serve(*options); });
}

}  // namespace pagoda
