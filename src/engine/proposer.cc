#include "engine/proposer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "core/error.h"
#if PAGODA_HAVE_CUDA
#include "core/cuda/graph.h"
#endif
#include "engine/sampler.h"
#include "model/causal_lm.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

// Draft `index` of requests[r] from row rows[r] of logits [n, vocab] f32; a null request takes
// none. A greedy request's draft is the argmax; a sampling request's a draw with its draft_rng, and
// it keeps the row its draft was drawn from, which the acceptance rule needs. On a GPU the drafts
// are taken there and only their ids come back; on the host, from the logits in place. A request
// whose logits are processed (penalties, min_tokens pending: see process_logits, with
// `eos_token_ids`) drafts from its row processed on the host, with its drafts so far as output, so
// that it drafts as it will be judged.
void add_drafts(const Tensor& logits, std::span<const int64_t> rows,
                std::span<Request* const> requests, int64_t index,
                std::span<const int64_t> eos_token_ids) {
  const bool greedy = std::all_of(requests.begin(), requests.end(),
                                  [](const Request* r) { return !r || r->params.greedy(); });
  // The rows sampling requests keep, apart from buffers the next forward rewrites.
  const Tensor kept = greedy ? Tensor() : logits.clone();
  const int64_t count = logits.size(0);
  const int64_t vocab = logits.size(1);
  std::vector<int32_t> drafted(count);
  std::vector<SamplingRow> draws(count);
  for (size_t r = 0; r < requests.size(); ++r) {
    if (requests[r] == nullptr || requests[r]->params.greedy()) continue;
    draws[rows[r]] = sampling_row(requests[r]->params, requests[r]->draft_rng.uniform());
  }
  if (logits.device().is_cpu()) {
    for (size_t r = 0; r < requests.size(); ++r) {
      if (requests[r] == nullptr) continue;
      drafted[rows[r]] = sample_token(logits.data<float>() + rows[r] * vocab, vocab,
                                      requests[r]->params, draws[rows[r]].uniform);
    }
  } else {
    const Tensor sampled = Tensor::uninitialized({2, count}, DType::kI32, logits.device());
    ops::sample(logits, draws, sampled.select(0, 0), sampled.select(0, 1).reinterpret(DType::kF32));
    const Tensor ids = sampled.select(0, 0).to(Device::cpu());
    std::copy_n(ids.data<int32_t>(), count, drafted.begin());
  }
  std::vector<Tensor> processed(count);  // host rows of requests that process their logits
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request* request = requests[r];
    if (request == nullptr || !processes_logits(*request)) continue;
    const Tensor raw = logits.select(0, rows[r]).to(Device::cpu()).contiguous();
    std::vector<int32_t> output(request->output_token_ids().begin(),
                                request->output_token_ids().end());
    if (index > 0) {
      output.insert(output.end(), request->draft_token_ids.begin(), request->draft_token_ids.end());
    }
    Tensor& row = processed[rows[r]];
    row = Tensor::empty({vocab}, DType::kF32);
    process_logits(*request, eos_token_ids, raw.data<float>(), vocab, output, row.data<float>());
    drafted[rows[r]] =
        sample_token(row.data<float>(), vocab, request->params, draws[rows[r]].uniform);
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    Request* request = requests[r];
    if (request == nullptr) continue;
    if (index == 0) {
      request->draft_token_ids.clear();
      request->draft_logits.clear();
    }
    request->draft_token_ids.push_back(drafted[rows[r]]);
    if (request->params.greedy()) continue;
    const Tensor& row = processed[rows[r]];
    request->draft_logits.push_back(row.defined() ? row : kept.select(0, rows[r]));
  }
}

// The ids on a GPU, for its embedding lookup; undefined on the CPU, which reads the host ids.
Tensor ids_on(const std::vector<int32_t>& ids, Device device) {
  if (device.is_cpu()) return Tensor();
  Tensor host = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::kI32);
  std::memcpy(host.raw_data(), ids.data(), ids.size() * sizeof(int32_t));
  return host.to(device);
}

std::vector<Request*> requests_of(std::span<const ScheduledChunk> runs) {
  std::vector<Request*> out;
  for (const ScheduledChunk& run : runs)
    out.push_back(run.request);
  return out;
}

int64_t model_layers(const KvCachePlan& plan) {
  int64_t count = 0;
  for (const KvLayer& layer : plan.layers)
    count += layer.is_drafter() ? 0 : 1;
  return count;
}

// A runner for each rank's drafter forwards over its cache, reading layers from `first_layer` on.
std::vector<std::unique_ptr<ModelRunner>> rank_runners(std::span<const RankShard> ranks,
                                                       std::span<CausalLm* const> models,
                                                       const KvCachePlan& plan,
                                                       bool enforce_eager) {
  std::vector<std::unique_ptr<ModelRunner>> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int64_t rank = static_cast<int64_t>(r);
    const CurrentDevice current(rank_device(ranks[r]));
    out.push_back(std::make_unique<ModelRunner>(
        *models[r], plan, *ranks[r].cache,
        RunnerOptions{.first_layer = model_layers(plan),
                      .enforce_eager = enforce_eager,
                      .context_rank = rank % plan.context_parallel_size}));
  }
  return out;
}

std::vector<Device> rank_devices(std::span<const RankShard> ranks) {
  std::vector<Device> out;
  for (const RankShard& rank : ranks)
    out.push_back(rank_device(rank));
  return out;
}

// Runs body(r) for every rank: through `runners` when there are several, else here.
void on_ranks(RankRunners* runners, const std::function<void(int64_t rank)>& body) {
  if (runners != nullptr) {
    runners->run_all(body);
  } else {
    body(0);
  }
}

// A draft model with KV layers of its own after the target's in the pool (each rank's shard).
class DraftModelProposer final : public Proposer {
 public:
  DraftModelProposer(std::vector<CausalLm*> models, std::span<const RankShard> ranks,
                     const KvCachePlan& plan, RankRunners* runners, bool enforce_eager,
                     std::vector<int64_t> eos_token_ids)
      : models_(std::move(models)),
        runners_(rank_runners(ranks, models_, plan, enforce_eager)),
        ranks_(runners),
        eos_token_ids_(std::move(eos_token_ids)) {}

  void propose(std::span<const ScheduledChunk> chunks, const KvCacheManager& blocks) override {
    // The first forward catches up on every token the drafter has not seen, the last included,
    // and drafts one; then one query per request for each further draft.
    std::vector<ScheduledChunk> catch_up;
    int64_t most = 0;
    for (const ScheduledChunk& chunk : chunks) {
      if (chunk.num_drafts == 0) continue;
      Request& request = *chunk.request;
      PAGODA_CHECK(request.draft_computed < request.num_tokens(),
                   "request {}: the drafter has {} of {} tokens", request.id,
                   request.draft_computed, request.num_tokens());
      catch_up.push_back({&request, request.draft_computed,
                          request.num_tokens() - request.draft_computed, chunk.num_drafts});
      most = std::max(most, chunk.num_drafts);
    }
    if (catch_up.empty()) return;
    std::vector<int64_t> one_row(catch_up.size(), 1);
    std::vector<ScheduledChunk> runs = catch_up;
    for (ScheduledChunk& run : runs)
      run.num_drafts = 0;
    const RunnerOutput first = execute(runs, one_row, blocks);
    add_drafts(first.logits, first.first_row, requests_of(catch_up), 0, eos_token_ids_);
    for (ScheduledChunk& run : catch_up)
      run.request->draft_computed = run.request->num_tokens();
    // Draft d (d >= 1) follows draft d - 1, fed at position num_tokens + d - 1: a one-token
    // decode, which replays a decode graph on a GPU.
    for (int64_t d = 1; d < most; ++d) {
      std::vector<ScheduledChunk> feeds;
      std::vector<Request*> drafting;
      for (const ScheduledChunk& run : catch_up) {
        if (run.num_drafts <= d) continue;
        feeds.push_back({run.request, run.request->num_tokens() + d - 1, 1, 0});
        drafting.push_back(run.request);
      }
      const RunnerOutput next = execute(feeds, std::vector<int64_t>(feeds.size(), 1), blocks);
      add_drafts(next.logits, next.first_row, drafting, d, eos_token_ids_);
    }
  }

  void after_step(std::span<const ScheduledChunk> chunks,
                  std::span<const std::vector<SampledToken>> tokens,
                  std::span<const int64_t> logits_rows, const RunnerOutput& output,
                  const KvCacheManager& blocks) override {
    (void)tokens;
    (void)logits_rows;
    (void)output;
    // The drafter runs every chunk the target ran without drafts, so it never catches up on a
    // whole prompt at once, and the blocks the prefix cache records hold its K/V too. Drafts it
    // wrote K/V for and the target kept count as its own.
    std::vector<ScheduledChunk> prompts;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const ScheduledChunk& chunk = chunks[i];
      Request& request = *chunk.request;
      if (chunk.num_drafts > 0) {
        // It wrote K/V for the drafts it fed back: all but the last.
        const int64_t kept = static_cast<int64_t>(tokens[i].size()) - 1;
        request.draft_computed = chunk.first + 1 + std::min(kept, chunk.num_drafts - 1);
        continue;
      }
      const int64_t end = chunk.first + chunk.num_tokens;
      if (request.draft_computed >= end) continue;
      prompts.push_back({&request, request.draft_computed, end - request.draft_computed, 0});
    }
    if (prompts.empty()) return;
    on_ranks(ranks_, [&](int64_t rank) {
      models_[rank]->forward(runners_[rank]->prepare(prompts, blocks));
    });
    for (const ScheduledChunk& chunk : prompts)
      chunk.request->draft_computed = chunk.first + chunk.num_tokens;
  }

 private:
  // One forward on every rank; rank 0's output.
  RunnerOutput execute(std::span<const ScheduledChunk> runs, std::span<const int64_t> logits_rows,
                       const KvCacheManager& blocks) {
    RunnerOutput output;
    on_ranks(ranks_, [&](int64_t rank) {
      RunnerOutput out = runners_[rank]->execute(runs, logits_rows, blocks);
      if (rank == 0) output = std::move(out);
    });
    return output;
  }

  std::vector<CausalLm*> models_;                      // per rank
  std::vector<std::unique_ptr<ModelRunner>> runners_;  // per rank
  RankRunners* ranks_;                                 // with several ranks
  std::vector<int64_t> eos_token_ids_;                 // for requests that process logits
};

// The Gemma 4 assistant, reading the target's caches (each rank's shard reading its own).
class AssistantProposer final : public Proposer {
 public:
  AssistantProposer(std::vector<Gemma4Model*> targets,
                    std::vector<const Gemma4Assistant*> assistants,
                    std::span<const RankShard> ranks, const KvCachePlan& plan, RankRunners* runners,
                    bool enforce_eager, std::vector<int64_t> eos_token_ids)
      : targets_(std::move(targets)),
        assistants_(std::move(assistants)),
        runners_(rank_runners(ranks, std::vector<CausalLm*>(targets_.begin(), targets_.end()), plan,
                              enforce_eager)),
        ranks_(runners),
        devices_(rank_devices(ranks)),
        target_(*targets_[0]),
        assistant_(*assistants_[0]),
        runner_(*runners_[0]),
        eos_token_ids_(std::move(eos_token_ids)) {}
  ~AssistantProposer() override;

  void propose(std::span<const ScheduledChunk> chunks, const KvCacheManager& blocks) override {
    // One query per request at the position of its last token (not yet in the cache), over
    // everything cached; every drafting step reuses it.
    std::vector<QueryToken> queries;
    std::vector<Request*> requests;
    std::vector<int64_t> wanted;
    int64_t most = 0;
    for (const ScheduledChunk& chunk : chunks) {
      if (chunk.num_drafts == 0) continue;
      Request& request = *chunk.request;
      PAGODA_CHECK(request.draft_hidden.defined(), "request {} has no hidden state to draft from",
                   request.id);
      queries.push_back({.request = &request,
                         .token = request.token_ids.back(),
                         .position = request.num_computed,
                         .seq_len = request.num_computed});
      requests.push_back(&request);
      wanted.push_back(chunk.num_drafts);
      most = std::max(most, chunk.num_drafts);
    }
    if (requests.empty()) return;
    if (can_capture(requests)) {
      propose_in_graph(queries, requests, wanted, most, blocks);
      return;
    }
    const int64_t rows = static_cast<int64_t>(requests.size());
    const Tensor& first_hidden = requests[0]->draft_hidden;
    const Tensor first_state =
        Tensor::empty({rows, first_hidden.size(1)}, first_hidden.dtype(), first_hidden.device());
    std::vector<int32_t> tokens;
    std::vector<int64_t> logits_rows;
    for (int64_t r = 0; r < rows; ++r) {
      first_state.select(0, r).copy_from(requests[r]->draft_hidden.select(0, 0));
      tokens.push_back(requests[r]->token_ids.back());
      logits_rows.push_back(r);
    }
    // Per rank: its step's inputs and the hidden state each step feeds the next, on its device.
    const int64_t num_ranks = static_cast<int64_t>(runners_.size());
    std::vector<const ForwardBatch*> batches(num_ranks);
    std::vector<Tensor> states(num_ranks);
    std::vector<Request*> drafting = requests;
    for (int64_t d = 0; d < most; ++d) {
      // A request that wants fewer drafts rides along; what it would draft later is dropped.
      for (int64_t r = 0; r < rows; ++r)
        drafting[r] = d < wanted[r] ? requests[r] : nullptr;
      Tensor logits;
      on_ranks(ranks_, [&](int64_t rank) {
        if (d == 0) {
          batches[rank] = &runners_[rank]->prepare_queries(queries, blocks);
          states[rank] =
              first_state.device() == devices_[rank] ? first_state : first_state.to(devices_[rank]);
        }
        const Tensor& state = states[rank];
        DraftStep out = assistants_[rank]->step(
            targets_[rank]->embed(tokens, ids_on(tokens, state.device())), state, *batches[rank]);
        states[rank] = out.hidden;
        if (rank == 0) logits = out.logits;
      });
      add_drafts(logits, logits_rows, drafting, d, eos_token_ids_);
      for (int64_t r = 0; r < rows; ++r) {
        if (drafting[r] != nullptr) tokens[r] = requests[r]->draft_token_ids.back();
      }
    }
  }

  void after_step(std::span<const ScheduledChunk> chunks,
                  std::span<const std::vector<SampledToken>> tokens,
                  std::span<const int64_t> logits_rows, const RunnerOutput& output,
                  const KvCacheManager& blocks) override {
    (void)blocks;
    // The hidden state at the row that produced each request's newest token.
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (tokens[i].empty()) continue;
      const int64_t row = output.first_row[i] + (chunks[i].num_drafts > 0
                                                     ? static_cast<int64_t>(tokens[i].size()) - 1
                                                     : logits_rows[i] - 1);
      // A copy: a CUDA graph's next replay rewrites its output.
      chunks[i].request->draft_hidden = output.hidden.narrow(0, row, 1).clone();
    }
  }

 private:
  struct DraftGraph;

  // Whether the requests' drafting can replay a graph: on one GPU with graphs on, models that never
  // wait for the device, and only greedy requests whose drafts are the argmaxes of their raw
  // logits, taken on the device.
  bool can_capture(std::span<Request* const> requests) const {
    return ranks_ == nullptr && runner_.graphs_enabled() && !target_.synchronizes_with_host() &&
           !assistant_.synchronizes_with_host() &&
           static_cast<int64_t>(requests.size()) <= kMaxGraphBatch &&
           std::all_of(requests.begin(), requests.end(), [](const Request* r) {
             return r->params.greedy() && !processes_logits(*r);
           });
  }

  // The K drafting steps of a padded batch as one graph: each step's argmaxes (on the device) feed
  // the next step's embedding, and the drafts come back to the host in one copy at the end.
  void propose_in_graph(std::span<const QueryToken> queries, std::span<Request* const> requests,
                        std::span<const int64_t> wanted, int64_t most,
                        const KvCacheManager& blocks);

  std::vector<Gemma4Model*> targets_;                  // per rank
  std::vector<const Gemma4Assistant*> assistants_;     // per rank
  std::vector<std::unique_ptr<ModelRunner>> runners_;  // per rank
  RankRunners* ranks_;                                 // with several ranks
  std::vector<Device> devices_;                        // per rank
  // Rank 0's, which alone runs the graphs.
  Gemma4Model& target_;
  const Gemma4Assistant& assistant_;
  ModelRunner& runner_;
  std::vector<int64_t> eos_token_ids_;  // for requests that process their logits
  // By padded batch size and drafts per request.
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<DraftGraph>> graphs_;
};

struct AssistantProposer::DraftGraph {
#if PAGODA_HAVE_CUDA
  cuda::Graph graph;
#endif
  Tensor state;            // [padded, backbone hidden]: each request's hidden state to draft from
  Tensor drafts;           // [K, padded] int32, written by each replay
  Tensor logprobs;         // [K, padded] f32, the argmaxes' log-probabilities (unused)
  int64_t generation = 0;  // of the runner's buffers it was captured over
};

AssistantProposer::~AssistantProposer() = default;

void AssistantProposer::propose_in_graph(std::span<const QueryToken> queries,
                                         std::span<Request* const> requests,
                                         std::span<const int64_t> wanted, int64_t most,
                                         const KvCacheManager& blocks) {
#if PAGODA_HAVE_CUDA
  const int64_t rows = static_cast<int64_t>(requests.size());
  const ForwardBatch& batch = runner_.prepare_queries(queries, blocks, true);
  const int64_t padded = static_cast<int64_t>(batch.token_ids.size());
  const Tensor& first_hidden = requests[0]->draft_hidden;
  std::unique_ptr<DraftGraph>& entry = graphs_[{padded, most}];
  const bool capture = !entry || entry->generation != runner_.generation();
  if (capture) {
    entry = std::make_unique<DraftGraph>();
    // Zeroed, so padding rows hold finite values.
    entry->state =
        Tensor::empty({padded, first_hidden.size(1)}, first_hidden.dtype(), first_hidden.device());
    entry->drafts = Tensor::empty({most, padded}, DType::kI32, first_hidden.device());
    entry->logprobs = Tensor::empty({most, padded}, DType::kF32, first_hidden.device());
  }
  for (int64_t r = 0; r < rows; ++r)
    entry->state.select(0, r).copy_from(requests[r]->draft_hidden.select(0, 0));
  const DraftGraph& g = *entry;
  const std::vector<int32_t> checked(padded, 0);  // host ids for the embedding's count and check
  const auto chain = [&] {
    Tensor ids = batch.device_token_ids;  // each request's newest token; padding rows 0
    Tensor state = g.state;
    for (int64_t d = 0; d < most; ++d) {
      const DraftStep out = assistant_.step(target_.embed(checked, ids), state, batch);
      ops::sample(out.logits, std::vector<SamplingRow>(padded), g.drafts.select(0, d),
                  g.logprobs.select(0, d));
      ids = g.drafts.select(0, d);
      state = out.hidden;
    }
  };
  if (capture) {
    // An eager run sizes every cached buffer, so the capture allocates nothing.
    chain();
    entry->graph.capture(chain);
    entry->generation = runner_.generation();
  }
  entry->graph.replay();
  const Tensor drafts = entry->drafts.to(Device::cpu());
  for (int64_t r = 0; r < rows; ++r) {
    Request& request = *requests[r];
    request.draft_token_ids.clear();
    request.draft_logits.clear();
    for (int64_t d = 0; d < wanted[r]; ++d)
      request.draft_token_ids.push_back(drafts.data<int32_t>()[d * padded + r]);
  }
#else
  (void)queries;
  (void)requests;
  (void)wanted;
  (void)most;
  (void)blocks;
  fail("this pagoda binary was built without CUDA");
#endif
}

}  // namespace

Drafter load_drafter(const SpeculativeConfig& config, Device device,
                     std::optional<DType> dummy_dtype, uint64_t seed, const TensorParallel& tp) {
  Drafter drafter{.config = config};
  WeightSource weights = dummy_dtype ? WeightSource::dummy(*dummy_dtype, seed)
                                     : WeightSource::from_checkpoint(config.model_dir);
  weights.set_device(device);
  if (config.method == SpeculativeMethod::kMtp) {
    drafter.assistant = std::make_unique<Gemma4Assistant>(config.drafter, weights, tp);
  } else {
    drafter.model = build_causal_lm(config.drafter, weights, tp);
  }
  return drafter;
}

std::unique_ptr<Proposer> make_proposer(std::span<const RankShard> ranks, const KvCachePlan& plan,
                                        RankRunners* runners, bool enforce_eager,
                                        std::vector<int64_t> eos_token_ids) {
  PAGODA_CHECK(!ranks.empty() && ranks[0].drafter != nullptr, "a proposer without a drafter");
  PAGODA_CHECK((runners == nullptr) == (ranks.size() == 1),
               "a proposer for {} ranks with{} rank runners", ranks.size(), runners ? "" : "out");
  const bool model = ranks[0].drafter->model != nullptr;
  std::vector<CausalLm*> models;
  std::vector<Gemma4Model*> targets;
  std::vector<const Gemma4Assistant*> assistants;
  const int64_t first_drafter_layer =
      std::find_if(plan.layers.begin(), plan.layers.end(),
                   [](const KvLayer& layer) { return layer.is_drafter(); }) -
      plan.layers.begin();
  for (const RankShard& rank : ranks) {
    PAGODA_CHECK(rank.drafter != nullptr && (rank.drafter->model != nullptr) == model,
                 "ranks with different drafters");
    if (model) {
      models.push_back(rank.drafter->model.get());
      continue;
    }
    PAGODA_CHECK(rank.drafter->assistant != nullptr,
                 "a drafter with neither a model nor an assistant");
    auto* gemma4 = dynamic_cast<Gemma4Model*>(rank.model);
    if (gemma4 == nullptr) {
      fail("--speculative-config: the Gemma 4 assistant drafts for a Gemma 4 target only");
    }
    // An assistant layer that reads a target layer's cache (as the plan resolved it) reads it
    // with that layer's scales.
    for (int64_t i = first_drafter_layer; i < static_cast<int64_t>(plan.layers.size()); ++i) {
      const int64_t source = plan.layers[i].source;
      if (source >= 0 && source < first_drafter_layer) {
        rank.drafter->assistant->use_cache_scales_of(i - first_drafter_layer, *gemma4, source);
      }
    }
    targets.push_back(gemma4);
    assistants.push_back(rank.drafter->assistant.get());
  }
  if (model) {
    return std::make_unique<DraftModelProposer>(std::move(models), ranks, plan, runners,
                                                enforce_eager, std::move(eos_token_ids));
  }
  return std::make_unique<AssistantProposer>(std::move(targets), std::move(assistants), ranks, plan,
                                             runners, enforce_eager, std::move(eos_token_ids));
}

}  // namespace pagoda
