// Drafters for speculative decoding, behind one interface. Before a step, a proposer fills the
// request of every chunk that verifies drafts with chunk.num_drafts tokens (draft_token_ids, and
// for a sampling request the drafter's logits they were drawn from); the target then scores them
// all in one forward (engine/spec_acceptance.h decides which stay). After the step the proposer
// sees what the target computed, to keep what it drafts from next time.
//
// Two kinds:
// - the Gemma 4 assistant ("mtp"): it owns no KV and reads the target's caches; it drafts from the
//   target's embedding of the last token and the target's hidden state that produced it, chaining
//   K steps at one position;
// - a draft model ("draft_model"): a causal LM with KV layers of its own in the target's pool. It
//   runs over every prompt chunk the target runs, keeps its own computed length per request
//   (Request::draft_computed), catches up on the tokens the target kept, and drafts one token a
//   forward.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "engine/rank_runners.h"
#include "engine/speculative_config.h"
#include "model/arch/gemma4_assistant.h"

namespace pagoda {

// A loaded drafter: the draft model, or the assistant.
struct Drafter {
  SpeculativeConfig config;
  std::unique_ptr<CausalLm> model;             // with "draft_model"
  std::unique_ptr<Gemma4Assistant> assistant;  // with "mtp"
};

// Loads the drafter `config` names from its checkpoint (or dummy weights of `dummy_dtype` when
// given), on `device`, as the rank `tp` places it holds it (its shard under TP). Error for a bad
// checkpoint, or a drafter this build cannot run there.
Drafter load_drafter(const SpeculativeConfig& config, Device device,
                     std::optional<DType> dummy_dtype = std::nullopt, uint64_t seed = 0,
                     const TensorParallel& tp = {});

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Drafts for the chunks with num_drafts > 0 (scheduled, blocks allocated for their drafts).
  virtual void propose(std::span<const ScheduledChunk> chunks, const KvCacheManager& blocks) = 0;
  // After the target's forward and sampling: chunk i produced tokens[i] (the kept drafts and the
  // token after them), and the hidden states of its logits rows start at output.first_row[i].
  virtual void after_step(std::span<const ScheduledChunk> chunks,
                          std::span<const std::vector<SampledToken>> tokens,
                          std::span<const int64_t> logits_rows, const RunnerOutput& output,
                          const KvCacheManager& blocks) = 0;
};

// The proposer of each rank's drafter for its target, over the pool `plan` (the drafter's layers
// planned after the target's) and the rank's cache. With several ranks (TP or DCP), `runners` runs
// them: every drafting forward runs on all ranks at once, and rank 0 alone takes the drafts and
// updates the requests between forwards. Error when the pair cannot run together (an "mtp"
// drafter with a target that is not Gemma 4). On one GPU, unless `enforce_eager`, the assistant's
// K drafting steps for a batch of greedy requests replay one CUDA graph, and a draft model's
// one-token steps replay its decode graphs. Requests with penalties or a pending min_tokens draft
// from their logits processed as the sampler processes them (`eos_token_ids` being the model's).
std::unique_ptr<Proposer> make_proposer(std::span<const RankShard> ranks, const KvCachePlan& plan,
                                        RankRunners* runners, bool enforce_eager,
                                        std::vector<int64_t> eos_token_ids);

}  // namespace pagoda
