// Host-side cost of one decode step for 256 running requests of mixed lengths: scheduling, block
// allocation, prefix-cache bookkeeping and metadata building. No model runs. Times 200 decode steps
// after 10 untimed ones (the first step of a run allocates its buffers) and prints a table.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "attention/cpu/cpu_backend.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"

namespace pagoda {
namespace {

// A model that only records the batch, so the step is host work alone.
class NoModel final : public CausalLm {
 public:
  Tensor forward(const ForwardBatch& batch) override { return Tensor(); }
  Tensor compute_logits(const Tensor& hidden) override { return Tensor(); }
};

LayerAttentionConfig layer(AttentionKind kind, int64_t index) {
  return {.name = "model.layers." + std::to_string(index) + ".self_attn",
          .kind = kind,
          .sliding_window = kind == AttentionKind::kSliding ? 512 : 0,
          .num_q_heads = 8,
          .num_kv_heads = 1,
          .head_size_k = 8,
          .head_size_v = 8};
}

void run() {
  constexpr int kRequests = 256;
  constexpr int kSteps = 200;
  constexpr int kWarmupSteps = 10;  // untimed: a buffer's first use allocates
  // A hybrid model: 4 sliding layers and 2 full ones.
  ModelConfig model;
  model.source = "bench";
  model.max_position_embeddings = 8192;
  for (int i = 0; i < 6; ++i) {
    model.layers.push_back(layer(i % 3 == 2 ? AttentionKind::kFull : AttentionKind::kSliding, i));
  }
  const KvCachePlan plan = plan_kv_cache(
      build_kv_layers(
          model, nullptr,
          {.block_size = 16, .dtype = DType::kBF16, .backend = &cpu_attention_backend()}),
      {.num_blocks = 200000, .max_model_len = 8192});
  const KvCache cache = allocate_kv_cache(plan, Device::cpu());
  KvCacheManager blocks(plan);
  Scheduler scheduler({.max_num_seqs = kRequests, .max_num_batched_tokens = 8192}, blocks);
  NoModel no_model;
  ModelRunner runner(no_model, plan, cache);

  std::mt19937 rng(1);
  std::vector<Request> requests;
  requests.reserve(kRequests);
  for (int r = 0; r < kRequests; ++r) {
    const int length = std::uniform_int_distribution<int>(100, 4000)(rng);
    std::vector<int32_t> tokens;
    for (int t = 0; t < length; ++t)
      tokens.push_back(static_cast<int32_t>(rng() % 32000));
    requests.emplace_back(r, std::move(tokens), SamplingParams{}, 0);
  }
  for (Request& request : requests)
    scheduler.add(&request);
  // Prefill everything (chunked by the budget) before timing decode steps.
  while (true) {
    const std::vector<ScheduledChunk> chunks = scheduler.schedule();
    scheduler.complete(chunks);
    bool all_decoding = true;
    for (const Request& r : requests)
      all_decoding = all_decoding && r.num_computed == r.num_tokens();
    if (all_decoding) break;
  }
  std::vector<double> micros;
  // Mean time of each phase: schedule, build the batch and metadata, complete the step.
  double schedule_us = 0, prepare_us = 0, complete_us = 0;
  for (int step = -kWarmupSteps; step < kSteps; ++step) {
    for (Request& r : requests)
      r.token_ids.push_back(static_cast<int32_t>(rng() % 32000));
    const auto start = std::chrono::steady_clock::now();
    const std::vector<ScheduledChunk> chunks = scheduler.schedule();
    const auto t1 = std::chrono::steady_clock::now();
    const ForwardBatch& batch = runner.prepare(chunks, blocks);
    const auto t2 = std::chrono::steady_clock::now();
    scheduler.complete(chunks);
    const auto end = std::chrono::steady_clock::now();
    if (step < 0) continue;
    micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    schedule_us += std::chrono::duration<double, std::micro>(t1 - start).count() / kSteps;
    prepare_us += std::chrono::duration<double, std::micro>(t2 - t1).count() / kSteps;
    complete_us += std::chrono::duration<double, std::micro>(end - t2).count() / kSteps;
    if (static_cast<int64_t>(batch.token_ids.size()) != kRequests) {
      fmt::print("step {} scheduled {} requests\n", step, batch.token_ids.size());
    }
  }
  std::sort(micros.begin(), micros.end());
  double total = 0;
  for (double m : micros)
    total += m;
  fmt::print(
      "| requests | groups | steps | mean us/step | p50 | p99 | schedule | metadata | complete "
      "|\n|---|---|---|---|---|---|---|---|---|\n");
  fmt::print("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", kRequests,
             plan.groups.size(), kSteps, total / micros.size(), micros[micros.size() / 2],
             micros[micros.size() * 99 / 100], schedule_us, prepare_us, complete_us);
}

}  // namespace
}  // namespace pagoda

int main() {
  pagoda::run();
  return 0;
}
