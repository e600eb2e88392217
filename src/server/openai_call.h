// One OpenAI completion or chat call in flight: every prompt × n choices submitted to the engine
// together (so they run in one batch), and their deltas turned into the API's streamed chunks or
// whole response, with stop strings, echo, log-probabilities and usage.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine_service.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

class OpenAiCall {
 public:
  // `model` is the name responses carry. Everything given must outlive the call.
  OpenAiCall(EngineService& engine, const Tokenizer& tokenizer, OpenAiRequest request,
             const std::string& model);
  ~OpenAiCall();  // aborts the choices still running

  // Submits every choice; one the engine refuses aborts the others and raises ApiError 400.
  // `notify` is called from the engine thread whenever news arrives (see EngineService::submit).
  void submit(std::function<void()> notify = {});
  bool finished() const;
  // Aborts every choice still running (the client went away, or a stop string was seen).
  void abort_unfinished();
  // Stops the engine's notifications (what submit() was given); none runs once it returns.
  void stop_notifications();
  // One streaming chunk per choice that moved since the last call; never waits (submit()'s
  // notification says when to call).
  std::vector<nlohmann::ordered_json> poll();
  // The whole response, once finished().
  nlohmann::ordered_json response();
  // The streamed usage chunk (stream_options.include_usage), and whether it was asked for.
  nlohmann::ordered_json usage_chunk();
  bool wants_usage() const;
  // Set when the engine failed a choice.
  const std::string& error() const;

 private:
  class State;
  std::unique_ptr<State> state_;
};

}  // namespace pagoda
