// The engine on its own thread. Callers on other threads (HTTP handlers, the library facade)
// submit requests and read each request's deltas from its own thread-safe queue; new requests and
// aborts take effect between steps. The thread sleeps while there is nothing to run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/metrics.h"
#include "tokenizer/text_stream.h"

namespace pagoda {

// One request's side of the queue.
class RequestHandle {
 public:
  // Waits up to `timeout` for news; returns what arrived (nothing on a timeout). After the delta
  // with a finish reason, nothing more comes.
  std::vector<RequestDelta> wait(std::chrono::milliseconds timeout);
  // Set when the engine failed while running the request (the last delta then says error).
  std::string error() const;
  // No more notifications: once it returns, none is running or will run.
  void clear_notify();

 private:
  friend class EngineService;
  using Clock = std::chrono::steady_clock;
  // Queues a delta and wakes the reader; `error`, when given, is what error() says from then on.
  void push(RequestDelta delta, std::string error);

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestDelta> deltas_;
  std::string error_;
  std::function<void()> notify_;  // called (under mutex_) when deltas arrive
  // Engine-thread state:
  int64_t engine_id_ = -1;  // -1 until the engine has it
  Clock::time_point submitted_;
  Clock::time_point last_token_;
  bool has_token_ = false;
};

class EngineService {
 public:
  // Starts the thread. The model, plan, cache and drafter must outlive the service.
  EngineService(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
                const EngineConfig& config, Drafter* drafter = nullptr);
  ~EngineService();  // stops the thread; unfinished requests are dropped
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  // Validates the request (Error names the problem) and queues it. `notify`, when given, is
  // called from the engine thread whenever the request's deltas arrive; it must return quickly
  // and must not call back into the service or the handle.
  std::shared_ptr<RequestHandle> submit(GenerationRequest request,
                                        std::function<void()> notify = {});
  // Ends a request wherever it is and frees its blocks; a no-op once it has finished.
  void abort(const std::shared_ptr<RequestHandle>& handle);
  // Gauges, counters and latency histograms in Prometheus text format.
  std::string metrics_text() const;
  // The same gauges and counters as of the last step.
  struct Snapshot {
    int64_t running = 0;
    int64_t waiting = 0;
    double kv_cache_usage = 0;  // share of the KV blocks in use
    GenerationStats totals;
  };
  Snapshot snapshot() const;
  // False while the engine is failing: after a step that failed, until one succeeds or a few
  // seconds pass without another.
  bool healthy() const;

 private:
  void loop();
  void admit_and_abort();  // engine thread: takes queued requests and aborts
  void deliver(const std::vector<RequestDelta>& deltas);
  void update_gauges();             // under mutex_
  void record_health(bool failed);  // after a step: whether it failed
  // Ends every active request with `message` (kError) and aborts it in the engine.
  void fail_all(const std::string& message);

  const KvCachePlan& plan_;
  Engine engine_;  // used by the engine thread only (validate() excepted)
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<GenerationRequest, std::shared_ptr<RequestHandle>>> incoming_;
  std::vector<std::shared_ptr<RequestHandle>> aborting_;
  bool stopping_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_failure_;   // since the last good step
  std::unordered_map<int64_t, std::shared_ptr<RequestHandle>> active_;  // engine thread only

  // Metrics, under mutex_.
  int64_t running_ = 0;
  int64_t waiting_ = 0;
  double kv_usage_ = 0;
  GenerationStats stats_;
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram e2e_latency_;

  std::thread thread_;  // last: started once everything above exists
};

// A delta's tokens through its request's text stream: the text that became final, and how many of
// the delta's tokens the request keeps: all of them, unless a stop string was completed, when the
// tokens after the one that completed it (a step with drafts adds several) are dropped. A stop
// token (EOS or a stop_token_id) ends the text without appearing in it, as in vLLM, and is kept.
TextStream::Added add_delta_text(TextStream& text, const RequestDelta& delta);

}  // namespace pagoda
