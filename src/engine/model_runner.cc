#include "engine/model_runner.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "core/error.h"
#if PAGODA_HAVE_CUDA
#include "core/cuda/graph.h"
#endif

namespace pagoda {

namespace {

// One token after a non-empty cache, with any drafts to verify.
bool is_decode(const ScheduledChunk& chunk) {
  return chunk.num_tokens == 1 && chunk.first > 0;
}

}  // namespace

int64_t graph_batch_size(int64_t batch) {
  if (batch <= 8) return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(batch)));
  return (batch + 7) / 8 * 8;
}

struct ModelRunner::DecodeGraph {
#if PAGODA_HAVE_CUDA
  cuda::Graph graph;
#endif
  Tensor hidden;           // [padded batch, hidden] on the device, written by each replay
  Tensor logits;           // [padded batch, vocab] f32 on the device, written by each replay
  int64_t generation = 0;  // of the buffers it was captured over
};

ModelRunner::~ModelRunner() = default;

ModelRunner::ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
                         const RunnerOptions& options)
    : model_(model),
      plan_(plan),
      device_(cache.buffers.empty() ? Device::cpu() : cache.buffers[0].device()),
      enforce_eager_(options.enforce_eager),
      context_{.rank = options.context_rank,
               .size = plan.context_parallel_size,
               .interleave = plan.context_interleave},
      metadata_(plan.groups.size()) {
  PAGODA_CHECK(context_.rank >= 0 && context_.rank < context_.size,
               "context rank {} of a plan over {} ranks", context_.rank, context_.size);
  const int64_t first_layer = options.first_layer;
  PAGODA_CHECK(first_layer >= 0 && first_layer < static_cast<int64_t>(plan.layers.size()),
               "first layer {} of a plan of {} layers", first_layer, plan.layers.size());
  // One plan per KV group and backend among the model's layers.
  std::map<std::pair<int64_t, const AttentionBackend*>, AttentionPlan*> made;
  for (size_t i = first_layer; i < plan.layers.size(); ++i) {
    const int64_t group = plan.placements[i].group;
    const AttentionBackend* backend = plan.layers[i].backend;
    AttentionPlan*& made_plan = made[{group, backend}];
    if (made_plan == nullptr) {
      plans_.push_back(backend->make_plan({.page = plan.groups[group].spec.page,
                                           .max_model_len = plan.max_model_len,
                                           .device = device_}));
      plan_groups_.push_back(group);
      made_plan = plans_.back().get();
    }
    views_.push_back(cache.views[i]);
    layers_.push_back({.plan = made_plan});
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i].cache = &views_[i];
  batch_.attention = layers_;
}

void ModelRunner::begin_step(int64_t num_tokens, const KvCacheManager& blocks) {
  batch_.token_ids.clear();
  batch_.positions.clear();
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    AttentionMetadata& meta = metadata_[g];
    meta.num_actual_tokens = num_tokens;
    meta.num_decode_seqs = 0;
    meta.num_decode_tokens = 0;
    meta.block_table = blocks.table_data(g);
    meta.block_table_stride = blocks.table_stride(g);
    meta.query_start.assign(1, 0);
    meta.seq_lens.clear();
    meta.block_table_rows.clear();
    meta.slot_mapping.clear();
    meta.context = context_;
  }
}

void ModelRunner::add_sequence(const Request& request, int64_t num_queries, int64_t seq_len,
                               bool writes, bool decode) {
  const int32_t row = request.kv_row;
  PAGODA_CHECK(row >= 0 && seq_len <= plan_.max_model_len,
               "request {} (row {}) runs {} tokens; max_model_len is {}", request.id, row, seq_len,
               plan_.max_model_len);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    AttentionMetadata& meta = metadata_[g];
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    const int32_t* table = meta.block_table.data() + row * meta.block_table_stride;
    if (decode) {
      meta.num_decode_seqs += 1;
      meta.num_decode_tokens += num_queries;
    }
    meta.query_start.push_back(meta.query_start.back() + num_queries);
    meta.seq_lens.push_back(seq_len);
    meta.block_table_rows.push_back(row);
    // Under DCP, this rank's tokens are dealt into its pages in order.
    for (int64_t p = seq_len - num_queries; p < seq_len; ++p) {
      int64_t slot = -1;
      if (writes && context_.owns(p)) {
        const int64_t local = context_.local_index(p);
        slot = int64_t{table[local / block_size]} * block_size + local % block_size;
      }
      meta.slot_mapping.push_back(slot);
    }
  }
}

const ForwardBatch& ModelRunner::finish_step(int64_t padding_rows, const AttentionStep& step) {
  const size_t rows = batch_.token_ids.size() + padding_rows;
  batch_.token_ids.resize(rows, 0);
  batch_.positions.resize(rows, 0);
  for (size_t p = 0; p < plans_.size(); ++p)
    plans_[p]->update(metadata_[plan_groups_[p]], step);
  if (on_device()) upload_tokens();
  return batch_;
}

const ForwardBatch& ModelRunner::prepare(std::span<const ScheduledChunk> ordered,
                                         const KvCacheManager& blocks, int64_t padding_rows,
                                         const AttentionStep& step) {
  int64_t num_tokens = 0;
  for (const ScheduledChunk& chunk : ordered)
    num_tokens += chunk.total();
  begin_step(num_tokens, blocks);
  // Each chunk's row of the block tables; the scheduler allocated blocks for all its tokens.
  for (const ScheduledChunk& chunk : ordered) {
    for (int64_t i = 0; i < chunk.total(); ++i) {
      batch_.token_ids.push_back(chunk.token(i));
      batch_.positions.push_back(chunk.first + i);
    }
    add_sequence(*chunk.request, chunk.total(), chunk.first + chunk.total(), true,
                 is_decode(chunk));
  }
  return finish_step(padding_rows, step);
}

const ForwardBatch& ModelRunner::prepare_queries(std::span<const QueryToken> queries,
                                                 const KvCacheManager& blocks, bool graph) {
  const int64_t count = static_cast<int64_t>(queries.size());
  begin_step(count, blocks);
  for (const QueryToken& query : queries) {
    batch_.token_ids.push_back(query.token);
    batch_.positions.push_back(query.position);
    add_sequence(*query.request, 1, query.seq_len, false, true);
  }
  const int64_t padding = graph ? graph_batch_size(count) - count : 0;
  return finish_step(padding, {.padding_seqs = padding, .graph = graph});
}

void ModelRunner::upload_tokens() {
  ForwardBatch& batch = batch_;
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  if (!device_ids_.defined() || device_ids_.size(0) < tokens) {
    const int64_t capacity = std::max<int64_t>(tokens, 256);
    device_ids_ = Tensor::empty({capacity}, DType::kI32, device_);
    device_positions_ = Tensor::empty({capacity}, DType::kI64, device_);
    ++token_buffers_;
  }
  Tensor host_ids = Tensor::empty({tokens}, DType::kI32);
  Tensor host_positions = Tensor::empty({tokens}, DType::kI64);
  std::memcpy(host_ids.raw_data(), batch.token_ids.data(), tokens * 4);
  std::memcpy(host_positions.raw_data(), batch.positions.data(), tokens * 8);
  batch.device_token_ids = device_ids_.narrow(0, 0, tokens);
  batch.device_positions = device_positions_.narrow(0, 0, tokens);
  batch.device_token_ids.copy_from(host_ids);
  batch.device_positions.copy_from(host_positions);
}

int64_t ModelRunner::generation() const {
  int64_t generation = token_buffers_;
  for (const auto& plan : plans_)
    generation += plan->generation();
  return generation;
}

RunnerOutput ModelRunner::execute(std::span<const ScheduledChunk> chunks,
                                  std::span<const int64_t> logits_rows,
                                  const KvCacheManager& blocks) {
  PAGODA_CHECK(logits_rows.size() == chunks.size(), "{} logits row counts for {} chunks",
               logits_rows.size(), chunks.size());
  // Decodes first, each side in the caller's order.
  std::vector<size_t> order(chunks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return is_decode(chunks[i]); });
  std::vector<ScheduledChunk> ordered;
  ordered.reserve(chunks.size());
  for (size_t i : order)
    ordered.push_back(chunks[i]);

  // Rows of hidden states whose logits are wanted, in execution order.
  RunnerOutput output;
  output.first_row.assign(chunks.size(), 0);
  std::vector<int64_t> rows;
  int64_t token = 0;
  for (size_t i : order) {
    const int64_t count = chunks[i].total();
    PAGODA_CHECK(logits_rows[i] >= 1 && logits_rows[i] <= count,
                 "{} logits rows of a {}-token chunk", logits_rows[i], count);
    output.first_row[i] = static_cast<int64_t>(rows.size());
    for (int64_t t = token + count - logits_rows[i]; t < token + count; ++t)
      rows.push_back(t);
    token += count;
  }
  // A graph runs decode steps whose sequences all have one query length: one token each, or a
  // token and as many drafts.
  const bool decode_only = std::all_of(chunks.begin(), chunks.end(), [&](const ScheduledChunk& c) {
    return is_decode(c) && c.total() == chunks.front().total();
  });
  const int64_t count = static_cast<int64_t>(rows.size());
  if (on_device() && !enforce_eager_ && !model_.synchronizes_with_host() && decode_only &&
      count <= kMaxGraphBatch && count == token) {
    run_decode_graph(ordered, blocks, output);
  } else {
    output.hidden = select_rows(model_.forward(prepare(ordered, blocks)), rows);
    output.logits = model_.compute_logits(output.hidden);
  }
  return output;
}

Tensor ModelRunner::select_rows(const Tensor& hidden, const std::vector<int64_t>& rows) {
  const int64_t count = static_cast<int64_t>(rows.size());
  bool all_rows = count == hidden.size(0);
  for (int64_t r = 0; all_rows && r < count; ++r)
    all_rows = rows[r] == r;
  if (all_rows) return hidden;
  Tensor selected = Tensor::uninitialized({count, hidden.size(1)}, hidden.dtype(), hidden.device());
  for (int64_t r = 0; r < count; ++r)
    selected.select(0, r).copy_from(hidden.select(0, rows[r]));
  return selected;
}

// The first step at a padded size and query length runs eagerly (sizing every cached buffer),
// records a graph and replays it; later steps at that size only upload their inputs and replay it.
// Padding rows are sequences of as many tokens over the null block, written nowhere; their logits
// are dropped.
void ModelRunner::run_decode_graph(std::span<const ScheduledChunk> ordered,
                                   const KvCacheManager& blocks, RunnerOutput& output) {
#if PAGODA_HAVE_CUDA
  const int64_t batch = static_cast<int64_t>(ordered.size());
  const int64_t query_len = ordered.front().total();
  const int64_t padded = graph_batch_size(batch);
  const ForwardBatch& inputs = prepare(ordered, blocks, (padded - batch) * query_len,
                                       {.padding_seqs = padded - batch, .graph = true});
  std::unique_ptr<DecodeGraph>& entry = graphs_[{padded, query_len}];
  if (!entry || entry->generation != generation()) {
    // An eager run sizes every cached buffer, so the capture allocates nothing; its logits are
    // dropped to free theirs, and the replay below computes the step again (rewriting the same
    // K/V).
    model_.compute_logits(model_.forward(inputs));
    entry = std::make_unique<DecodeGraph>();
    entry->graph.capture([&] {
      entry->hidden = model_.forward(inputs);
      entry->logits = model_.compute_logits(entry->hidden);
    });
    entry->generation = generation();
  }
  entry->graph.replay();
  output.hidden = entry->hidden.narrow(0, 0, batch * query_len);
  output.logits = entry->logits.narrow(0, 0, batch * query_len);
#else
  (void)ordered;
  (void)blocks;
  (void)output;
  fail("this pagoda binary was built without CUDA");
#endif
}

}  // namespace pagoda
