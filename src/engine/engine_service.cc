#include "engine/engine_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"

namespace pagoda {
namespace {

// How long a failed step keeps the service unhealthy when no step follows it.
constexpr std::chrono::seconds kFailingFor{5};

}  // namespace

std::vector<RequestDelta> RequestHandle::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !deltas_.empty(); });
  std::vector<RequestDelta> out(std::make_move_iterator(deltas_.begin()),
                                std::make_move_iterator(deltas_.end()));
  deltas_.clear();
  return out;
}

std::string RequestHandle::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void RequestHandle::clear_notify() {
  std::lock_guard<std::mutex> lock(mutex_);
  notify_ = nullptr;
}

void RequestHandle::push(RequestDelta delta, std::string error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error.empty()) error_ = std::move(error);
  deltas_.push_back(std::move(delta));
  ready_.notify_all();
  if (notify_) notify_();
}

EngineService::EngineService(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
                             const EngineConfig& config, Drafter* drafter)
    : plan_(plan),
      engine_(model, plan, cache, config, drafter),
      time_to_first_token_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1,
                            2.5, 5, 7.5, 10, 20, 40, 80}),
      inter_token_latency_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5,
                            5, 7.5, 10, 20, 40, 80}),
      e2e_latency_({0.3, 0.5, 0.8, 1,  1.5, 2,   2.5, 5,   10,   15,  20,
                    30,  40,  50,  60, 120, 240, 480, 960, 1920, 7680}),
      thread_([this] { loop(); }) {}

EngineService::~EngineService() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestHandle> EngineService::submit(GenerationRequest request,
                                                     std::function<void()> notify) {
  engine_.validate(request);
  auto handle = std::make_shared<RequestHandle>();
  handle->submitted_ = RequestHandle::Clock::now();
  handle->notify_ = std::move(notify);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.emplace_back(std::move(request), handle);
  }
  wake_.notify_all();
  return handle;
}

void EngineService::abort(const std::shared_ptr<RequestHandle>& handle) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborting_.push_back(handle);
  }
  wake_.notify_all();
}

void EngineService::admit_and_abort() {
  std::vector<std::pair<GenerationRequest, std::shared_ptr<RequestHandle>>> incoming;
  std::vector<std::shared_ptr<RequestHandle>> aborting;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming.swap(incoming_);
    aborting.swap(aborting_);
  }
  for (auto& [request, handle] : incoming) {
    try {
      handle->engine_id_ = engine_.add_request(std::move(request));
      active_[handle->engine_id_] = handle;
    } catch (const Error& error) {  // validated at submit; the pool may still refuse it
      handle->push({.finish_reason = FinishReason::kError, .error = error.what()}, error.what());
    }
  }
  for (const auto& handle : aborting) {
    if (handle->engine_id_ >= 0 && active_.count(handle->engine_id_) != 0) {
      engine_.abort(handle->engine_id_);
    }
  }
}

void EngineService::deliver(const std::vector<RequestDelta>& deltas) {
  // Metrics first, so that a client who has seen its last delta also sees them updated.
  const auto now = RequestHandle::Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const RequestDelta& delta : deltas) {
      const auto it = active_.find(delta.request_id);
      if (it == active_.end()) continue;
      RequestHandle& handle = *it->second;
      for (size_t i = 0; i < delta.new_tokens.size(); ++i) {
        const auto since = now - (handle.has_token_ ? handle.last_token_ : handle.submitted_);
        (handle.has_token_ ? inter_token_latency_ : time_to_first_token_)
            .observe(std::chrono::duration<double>(since).count());
        handle.has_token_ = true;
        handle.last_token_ = now;
      }
      if (delta.finish_reason != FinishReason::kNone) {
        e2e_latency_.observe(std::chrono::duration<double>(now - handle.submitted_).count());
      }
    }
    update_gauges();
  }
  for (const RequestDelta& delta : deltas) {
    const auto it = active_.find(delta.request_id);
    if (it == active_.end()) continue;
    if (delta.finish_reason == FinishReason::kError) {
      spdlog::error("request {} failed: {}", delta.request_id, delta.error);
    }
    it->second->push(delta, delta.finish_reason == FinishReason::kError
                                ? fmt::format("the engine failed: {}", delta.error)
                                : std::string());
    if (delta.finish_reason != FinishReason::kNone) {
      engine_.release(delta.request_id);
      active_.erase(it);
    }
  }
}

void EngineService::update_gauges() {
  running_ = engine_.num_running();
  waiting_ = engine_.num_waiting();
  const double total = static_cast<double>(plan_.num_blocks - kNullBlocks);
  kv_usage_ = 1.0 - static_cast<double>(engine_.num_free_blocks()) / total;
  stats_ = engine_.stats();
}

void EngineService::fail_all(const std::string& message) {
  std::vector<RequestDelta> deltas;
  for (const auto& [id, handle] : active_) {
    try {
      // Frees what it holds, so the engine is left with nothing.
      engine_.fail_request(id, message);
    } catch (const std::exception&) {
    }
    deltas.push_back({.request_id = id, .finish_reason = FinishReason::kError, .error = message});
  }
  deliver(deltas);
}

void EngineService::loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !aborting_.empty() || engine_.has_unfinished();
      });
      if (stopping_) return;
    }
    // Health is recorded before the deltas go out, so that a client who sees its request fail
    // also sees /health say so.
    try {
      admit_and_abort();
      const std::vector<RequestDelta> deltas = engine_.step();
      record_health(std::any_of(deltas.begin(), deltas.end(), [](const RequestDelta& delta) {
        return delta.finish_reason == FinishReason::kError;
      }));
      deliver(deltas);
    } catch (const std::exception& error) {
      // A step that failed outside the model and sampler (which fail only their own requests)
      // ends every request; the server stays up.
      spdlog::error("an engine step failed; ending every request: {}", error.what());
      record_health(true);
      fail_all(error.what());
    }
  }
}

void EngineService::record_health(bool failed) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed) {
    last_failure_ = RequestHandle::Clock::now();
  } else {
    last_failure_.reset();
  }
}

bool EngineService::healthy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !last_failure_ || RequestHandle::Clock::now() - *last_failure_ > kFailingFor;
}

EngineService::Snapshot EngineService::snapshot() const {
  const std::lock_guard lock(mutex_);
  return {.running = running_, .waiting = waiting_, .kv_cache_usage = kv_usage_, .totals = stats_};
}

std::string EngineService::metrics_text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += render_metric("pagoda:num_requests_running", "gauge", "Requests in the running batch.",
                       static_cast<double>(running_));
  out += render_metric("pagoda:num_requests_waiting", "gauge", "Requests waiting to run.",
                       static_cast<double>(waiting_));
  out += render_metric("pagoda:kv_cache_usage_perc", "gauge",
                       "Fraction of KV cache blocks in use (1 means full).", kv_usage_);
  out += render_metric("pagoda:prefix_cache_queries_total", "counter",
                       "Prompt tokens looked up in the prefix cache.",
                       static_cast<double>(stats_.prefix_query_tokens));
  out += render_metric("pagoda:prefix_cache_hits_total", "counter",
                       "Prompt tokens found in the prefix cache.",
                       static_cast<double>(stats_.prefix_hit_tokens));
  out += render_metric("pagoda:num_preemptions_total", "counter", "Requests preempted.",
                       static_cast<double>(stats_.preemptions));
  out += render_metric("pagoda:prompt_tokens_total", "counter", "Prompt tokens taken.",
                       static_cast<double>(stats_.prompt_tokens));
  out += render_metric("pagoda:generation_tokens_total", "counter", "Tokens generated.",
                       static_cast<double>(stats_.generated_tokens));
  if (!stats_.spec_accepted_per_position.empty()) {
    // Speculative decoding, under vLLM's spec_decode names.
    out += render_metric("pagoda:spec_decode_num_drafts_total", "counter",
                         "Verify rounds: a request's drafts checked in a step.",
                         static_cast<double>(stats_.spec_rounds));
    out += render_metric("pagoda:spec_decode_num_draft_tokens_total", "counter",
                         "Draft tokens proposed.", static_cast<double>(stats_.spec_draft_tokens));
    out +=
        render_metric("pagoda:spec_decode_num_accepted_tokens_total", "counter",
                      "Draft tokens accepted.", static_cast<double>(stats_.spec_accepted_tokens));
    const std::string name = "pagoda:spec_decode_num_accepted_tokens_per_pos_total";
    out += fmt::format(
        "# HELP {} Rounds that accepted the draft at each position.\n# TYPE {} counter\n", name,
        name);
    for (size_t j = 0; j < stats_.spec_accepted_per_position.size(); ++j)
      out +=
          fmt::format("{}{{position=\"{}\"}} {}\n", name, j, stats_.spec_accepted_per_position[j]);
  }
  out += time_to_first_token_.render("pagoda:time_to_first_token_seconds",
                                     "Time from a request's arrival to its first token.");
  out += inter_token_latency_.render("pagoda:inter_token_latency_seconds",
                                     "Time between a request's consecutive tokens.");
  out += e2e_latency_.render("pagoda:e2e_request_latency_seconds",
                             "Time from a request's arrival to its end.");
  return out;
}

TextStream::Added add_delta_text(TextStream& text, const RequestDelta& delta) {
  std::vector<int32_t> ids;
  for (const SampledToken& token : delta.new_tokens)
    ids.push_back(token.token_id);
  const bool stop_token = delta.finish_reason == FinishReason::kStop && !ids.empty();
  TextStream::Added added = text.add({ids.data(), ids.size() - (stop_token ? 1 : 0)});
  if (!text.stopped()) added.tokens = ids.size();
  return added;
}

}  // namespace pagoda
