// The engine's step loop under any sequence of requests, steps, aborts and releases: llama-tiny on
// the CPU with a KV pool of 16 blocks of 4 tokens, so requests are preempted and recomputed, prefix
// caching on or off, and optionally drafting for itself (3 drafts). Requests carry any sampling
// parameters, log-probabilities, seeds, stop tokens and lengths; the engine may refuse them with
// an Error. Afterwards every request must finish within a bounded number of steps and every block
// must be back in the pool.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "engine/cache_config.h"
#include "engine/engine.h"
#include "engine/proposer.h"
#include "engine/speculative_config.h"
#include "fuzz/fuzz_util.h"
#include "kv/block_pool.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "model/weights.h"

using namespace pagoda;

namespace {

constexpr int64_t kBlocks = 16;
constexpr int64_t kMaxModelLen = 48;

struct Tiny {
  std::string dir = std::string(PAGODA_SOURCE_DIR) + "/tests/fixtures/llama-tiny";
  ModelConfig config = load_model_config(dir);
  std::unique_ptr<CausalLm> model;
  SpeculativeConfig spec = parse_speculative_config(
      R"({"model": ")" + dir + R"(", "num_speculative_tokens": 3})", dir, config);
  std::unique_ptr<Drafter> drafter;
  Tiny() {
    WeightSource weights = WeightSource::from_checkpoint(dir);
    model = build_causal_lm(config, weights);
    drafter = std::make_unique<Drafter>(load_drafter(spec, Device::cpu()));
  }
};

// Reads the input a byte at a time; zeros once it runs out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ >= size_; }
  uint8_t next() { return at_ < size_ ? data_[at_++] : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

GenerationRequest make_request(Bytes& in, int64_t vocab) {
  GenerationRequest request;
  const int length = in.next() % 40;  // 0 is refused, as are lengths past max_model_len
  for (int i = 0; i < length; ++i) {
    // Mostly a few ids, so prompts share prefixes; now and then one outside the vocabulary.
    const uint8_t b = in.next();
    request.prompt_token_ids.push_back(b == 255 ? static_cast<int32_t>(vocab) : b % 8);
  }
  SamplingParams& p = request.params;
  const uint8_t flags = in.next();
  p.max_tokens = in.next() % 34;
  p.temperature = (flags & 1) ? 0.0 : 0.1 + (in.next() % 30) / 10.0;
  if (flags & 2) p.top_k = in.next() % 300;
  if (flags & 4) p.top_p = (in.next() % 101) / 100.0;
  if (flags & 8) p.min_p = (in.next() % 100) / 100.0;
  if (flags & 16) {
    p.presence_penalty = (in.next() % 41) / 10.0 - 2.0;
    p.frequency_penalty = (in.next() % 41) / 10.0 - 2.0;
    p.repetition_penalty = (in.next() % 30) / 10.0;
  }
  if (flags & 32) {
    p.logprobs = in.next() % 22;
    p.prompt_logprobs = in.next() % 22;
  }
  if (flags & 64) p.seed = in.next();
  if (flags & 128) {
    p.min_tokens = in.next() % 8;
    p.stop_token_ids = {static_cast<int32_t>(in.next() % 8)};
    p.ignore_eos = (in.next() & 1) != 0;
  }
  return request;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tiny tiny;
  Bytes in(data, size);
  const uint8_t setup = in.next();
  const bool speculative = (setup & 1) != 0;
  const KvCachePlan plan = plan_cache(tiny.config, speculative ? &tiny.spec.drafter : nullptr,
                                      resolve_cache_config({.dtype = DType::kF32,
                                                            .block_size = 4,
                                                            .max_model_len = kMaxModelLen,
                                                            .num_blocks = kBlocks},
                                                           tiny.config, Device::cpu()));
  const KvCache cache = allocate_kv_cache(plan, Device::cpu());
  EngineConfig config{.vocab_size = tiny.config.vocab_size,
                      .max_model_len = plan.max_model_len,
                      .eos_token_ids = tiny.config.eos_token_ids};
  config.scheduler.enable_prefix_caching = (setup & 2) != 0;
  config.scheduler.max_num_batched_tokens = 8 + setup % 64;
  config.scheduler.max_num_seqs = 1 + (setup >> 2) % 8;
  Engine engine(*tiny.model, plan, cache, config, speculative ? tiny.drafter.get() : nullptr);

  std::vector<int64_t> ids;
  while (!in.empty()) {
    switch (in.next() % 5) {
      case 0:
      case 1:
        fuzz::expect_clean_errors(
            [&] { ids.push_back(engine.add_request(make_request(in, tiny.config.vocab_size))); });
        break;
      case 2:
        (void)engine.step();
        break;
      case 3:
        if (!ids.empty()) engine.abort(ids[in.next() % ids.size()]);
        break;
      case 4:
        if (!ids.empty()) {
          const int64_t id = ids[in.next() % ids.size()];
          if (engine.status(id) == RequestStatus::kFinished) {
            engine.release(id);
            ids.erase(std::find(ids.begin(), ids.end(), id));
          }
        }
        break;
    }
  }
  // Every request ends: at most max_model_len tokens each, one request at a time in the worst case.
  for (int64_t steps = 0; engine.has_unfinished(); ++steps) {
    if (steps > 4 * kMaxModelLen * static_cast<int64_t>(ids.size() + 1)) __builtin_trap();
    (void)engine.step();
  }
  if (engine.num_free_blocks() != plan.num_blocks - kNullBlocks) __builtin_trap();
  return 0;
}
