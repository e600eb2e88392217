#include "server/http_server.h"

#include <httplib.h>

#include <chrono>

#include "core/error.h"
#include "core/files.h"
#include "server/openai_call.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;

constexpr milliseconds kPollInterval{20};

Json error_body(const std::string& message, const std::string& type, const std::string& param,
                int status) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? Json() : Json(param)},
            {"code", status}}}};
}

void send_error(httplib::Response& response, int status, const std::string& message,
                const std::string& type = "invalid_request_error", const std::string& param = "") {
  response.status = status;
  response.set_content(error_body(message, type, param, status).dump(), "application/json");
}

void send_json(httplib::Response& response, const Json& body) {
  response.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace),
                       "application/json");
}

std::string sse(const Json& chunk) {
  return "data: " + chunk.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

// One API call: every prompt × n choices, submitted together so they run in one batch.

// Whether `given` equals `secret`, in a time that depends only on their lengths, so that timing
// a wrong key reveals nothing of the right one.
bool same_secret(std::string_view given, std::string_view secret) {
  if (given.size() != secret.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < secret.size(); ++i)
    differ |= static_cast<unsigned char>(given[i] ^ secret[i]);
  return differ == 0;
}

Json parse_body(const httplib::Request& request) {
  try {
    check_json_depth(request.body, "the body");
  } catch (const Error& error) {
    throw ApiError(400, error.what());
  }
  try {
    return Json::parse(request.body);
  } catch (const nlohmann::json::exception& error) {
    throw ApiError(400, fmt::format("the body is not valid JSON: {}", describe_json_error(error)));
  }
}

}  // namespace

OpenAiServer::OpenAiServer(EngineService& engine, const Tokenizer& tokenizer,
                           const ChatTemplate* chat, RequestLimits limits, ServerOptions options)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_(chat),
      limits_(std::move(limits)),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()) {
  httplib::Server& http = *http_;
  const int threads = std::max(options_.threads, 4);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(options_.max_body_bytes);
  // Statuses httplib sets itself (404, 413, ...) get an OpenAI error body too.
  http.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    const std::string message =
        response.status == 404   ? fmt::format("no route {} {}", request.method, request.path)
        : response.status == 413 ? std::string("the request body is too large")
                                 : fmt::format("HTTP status {}", response.status);
    send_error(response, response.status, message,
               response.status == 404 ? "NotFoundError" : "invalid_request_error");
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          message = e.what();
        } catch (...) {
        }
        send_error(response, 500, message, "InternalServerError");
      });
  // API keys guard the /v1 routes, as vLLM does.
  http.set_pre_routing_handler(
      [this](const httplib::Request& request, httplib::Response& response) {
        if (options_.api_key.empty() || request.path.rfind("/v1/", 0) != 0) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        if (!same_secret(request.get_header_value("Authorization"), "Bearer " + options_.api_key)) {
          send_error(response, 401, "missing or wrong API key (Authorization: Bearer ...)",
                     "AuthenticationError");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });

  http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("", "text/plain");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(engine_.metrics_text(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    send_json(response, {{"object", "list"},
                         {"data", Json::array({{{"id", limits_.served_model_name},
                                                {"object", "model"},
                                                {"created", 0},
                                                {"owned_by", "pagoda"},
                                                {"max_model_len", limits_.max_model_len}}})}});
  });

  const auto guarded = [](auto handler) {
    return [handler](const httplib::Request& request, httplib::Response& response) {
      try {
        handler(request, response);
      } catch (const ApiError& error) {
        send_error(response, error.status, error.what(), error.type, error.param);
      } catch (const Error& error) {
        send_error(response, 400, error.what());
      }
    };
  };
  http.Post(
      "/tokenize", guarded([this](const httplib::Request& request, httplib::Response& response) {
        const Json body = parse_body(request);
        if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
        std::vector<int32_t> ids;
        if (body.contains("messages")) {
          if (chat_ == nullptr) throw ApiError(400, "this model has no chat template", "messages");
          ids = chat_->encode(body["messages"]);
        } else if (body.contains("prompt") && body["prompt"].is_string()) {
          const bool special = body.value("add_special_tokens", true);
          ids =
              tokenizer_.encode(body["prompt"].get<std::string>(), {.add_special_tokens = special});
        } else {
          throw ApiError(400, "give 'prompt' (a string) or 'messages'", "prompt");
        }
        send_json(
            response,
            {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", limits_.max_model_len}});
      }));
  http.Post("/detokenize",
            guarded([this](const httplib::Request& request, httplib::Response& response) {
              const Json body = parse_body(request);
              if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
                throw ApiError(400, "give 'tokens', a list of token ids", "tokens");
              }
              std::vector<int32_t> ids;
              for (const Json& id : body["tokens"]) {
                if (!id.is_number_integer())
                  throw ApiError(400, "'tokens' must hold integers", "tokens");
                ids.push_back(id.get<int32_t>());
              }
              send_json(response, {{"prompt", tokenizer_.decode(ids)}});
            }));

  const auto completion_route = [this, guarded](Endpoint endpoint) {
    return guarded([this, endpoint](const httplib::Request& request, httplib::Response& response) {
      OpenAiRequest parsed =
          parse_openai_request(parse_body(request), endpoint, tokenizer_, chat_, limits_);
      const bool stream = parsed.stream;
      auto call = std::make_shared<OpenAiCall>(engine_, tokenizer_, std::move(parsed),
                                               limits_.served_model_name);
      call->submit();
      if (!stream) {
        while (!call->finished())
          call->poll(kPollInterval);
        if (!call->error().empty()) throw ApiError(500, call->error(), "", "InternalServerError");
        send_json(response, call->response());
        return;
      }
      response.set_header("Cache-Control", "no-cache");
      response.set_chunked_content_provider(
          "text/event-stream",
          [call](size_t, httplib::DataSink& sink) {
            for (const Json& chunk : call->poll(kPollInterval)) {
              const std::string event = sse(chunk);
              if (!sink.write(event.data(), event.size())) {
                call->abort_unfinished();  // the client went away
                return false;
              }
            }
            if (!call->finished()) {
              if (sink.is_writable && !sink.is_writable()) {
                call->abort_unfinished();
                return false;
              }
              return true;
            }
            std::string tail = call->wants_usage() ? sse(call->usage_chunk()) : std::string();
            tail += "data: [DONE]\n\n";
            sink.write(tail.data(), tail.size());
            sink.done();
            return true;
          },
          [call](bool) { call->abort_unfinished(); });
    });
  };
  http.Post("/v1/completions", completion_route(Endpoint::kCompletions));
  http.Post("/v1/chat/completions", completion_route(Endpoint::kChatCompletions));
}

OpenAiServer::~OpenAiServer() = default;

int OpenAiServer::bind() {
  if (options_.port == 0) {
    const int port = http_->bind_to_any_port(options_.host);
    if (port < 0) fail("cannot bind to {}", options_.host);
    options_.port = port;
    return port;
  }
  if (!http_->bind_to_port(options_.host, options_.port)) {
    fail("cannot bind to {}:{} (in use, or not an address of this machine)", options_.host,
         options_.port);
  }
  return options_.port;
}

void OpenAiServer::run() {
  http_->listen_after_bind();
}

void OpenAiServer::stop() {
  http_->stop();
}

}  // namespace pagoda
