#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

ModelRunner::ModelRunner(CausalLm& model, const KvCachePlan& plan, const KvCache& cache,
                         int64_t first_layer)
    : model_(model), plan_(plan) {
  PAGODA_CHECK(first_layer >= 0 && first_layer < static_cast<int64_t>(plan.layers.size()),
               "first layer {} of a plan of {} layers", first_layer, plan.layers.size());
  for (size_t i = first_layer; i < plan.layers.size(); ++i) {
    layer_views_.views.push_back(cache.views[i]);
    layer_groups_.push_back(plan.placements[i].group);
  }
  const Device device = cache.buffers.empty() ? Device::cpu() : cache.buffers[0].device();
  if (!device.is_cpu()) {
#if PAGODA_HAVE_CUDA
    device_inputs_ = std::make_unique<DeviceInputs>(plan, device);
#else
    fail("this pagoda binary was built without CUDA; a cache on {} cannot run", device.to_string());
#endif
  }
}

ForwardBatch ModelRunner::prepare(const std::vector<const ScheduledSequence*>& ordered,
                                  const KvCacheManager& blocks, int64_t padding_tokens) const {
  ForwardBatch batch;
  batch.kv_cache = &layer_views_;
  batch.layer_groups = &layer_groups_;
  int64_t num_tokens = 0;
  for (const ScheduledSequence* seq : ordered)
    num_tokens += static_cast<int64_t>(seq->new_token_ids.size());
  batch.token_ids.reserve(num_tokens + padding_tokens);
  batch.positions.reserve(num_tokens + padding_tokens);
  for (const ScheduledSequence* seq : ordered) {
    batch.token_ids.insert(batch.token_ids.end(), seq->new_token_ids.begin(),
                           seq->new_token_ids.end());
    for (size_t i = 0; i < seq->new_token_ids.size(); ++i)
      batch.positions.push_back(seq->num_computed_tokens + static_cast<int64_t>(i));
  }
  batch.token_ids.resize(num_tokens + padding_tokens, 0);
  batch.positions.resize(num_tokens + padding_tokens, 0);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    const int64_t block_size = plan_.groups[g].spec.page.block_size;
    AttentionMetadata meta;
    meta.num_actual_tokens = num_tokens;
    meta.block_table = blocks.table_data(g);
    meta.block_table_stride = blocks.table_stride(g);
    meta.query_start.reserve(ordered.size() + 1);
    meta.seq_lens.reserve(ordered.size());
    meta.block_table_rows.reserve(ordered.size());
    meta.slot_mapping.reserve(num_tokens);
    meta.query_start.push_back(0);
    for (const ScheduledSequence* seq : ordered) {
      const std::span<const int32_t> table = blocks.block_ids(seq->request_id, g);
      const int64_t new_tokens = static_cast<int64_t>(seq->new_token_ids.size());
      const int64_t total = seq->num_computed_tokens + new_tokens;
      PAGODA_CHECK(static_cast<int64_t>(table.size()) * block_size >= total,
                   "request {} has {} blocks of {} for {} tokens", seq->request_id, table.size(),
                   block_size, total);
      if (new_tokens == 1 && seq->num_computed_tokens > 0) meta.num_decode_tokens += 1;
      meta.query_start.push_back(meta.query_start.back() + new_tokens);
      meta.seq_lens.push_back(total);
      meta.block_table_rows.push_back(blocks.table_row(seq->request_id));
      for (int64_t p = seq->num_computed_tokens; p < total; ++p) {
        meta.slot_mapping.push_back(int64_t{table[p / block_size]} * block_size + p % block_size);
      }
    }
    batch.group_metadata.push_back(std::move(meta));
  }
  return batch;
}

RunnerOutput ModelRunner::execute(const std::vector<ScheduledSequence>& batch,
                                  const KvCacheManager& blocks) {
  // Decodes first, each side in the caller's order.
  std::vector<size_t> order(batch.size());
  for (size_t i = 0; i < batch.size(); ++i)
    order[i] = i;
  auto is_decode = [&](size_t i) {
    return batch[i].new_token_ids.size() == 1 && batch[i].num_computed_tokens > 0;
  };
  std::stable_partition(order.begin(), order.end(), is_decode);
  std::vector<const ScheduledSequence*> ordered;
  for (size_t i : order)
    ordered.push_back(&batch[i]);

  ForwardBatch inputs = prepare(ordered, blocks);
#if PAGODA_HAVE_CUDA
  if (device_inputs_) device_inputs_->upload(inputs);
#endif
  const Tensor hidden = model_.forward(inputs);

  // Rows of hidden states whose logits are wanted, in execution order.
  RunnerOutput output;
  output.first_row.assign(batch.size(), 0);
  output.num_rows.assign(batch.size(), 0);
  std::vector<int64_t> rows;
  int64_t token = 0;
  for (size_t i : order) {
    const int64_t count = static_cast<int64_t>(batch[i].new_token_ids.size());
    output.first_row[i] = static_cast<int64_t>(rows.size());
    const int64_t first = batch[i].all_logits ? token : token + count - 1;
    for (int64_t t = first; t < token + count; ++t)
      rows.push_back(t);
    output.num_rows[i] = static_cast<int64_t>(rows.size()) - output.first_row[i];
    token += count;
  }
  const int64_t count = static_cast<int64_t>(rows.size());
  Tensor selected;
  if (count == token && std::is_sorted(rows.begin(), rows.end())) {
    selected = hidden.narrow(0, 0, count);  // every row, as in a decode-only step
  } else {
    selected = Tensor::uninitialized({count, hidden.size(1)}, hidden.dtype(), hidden.device());
    for (int64_t r = 0; r < count; ++r)
      selected.select(0, r).copy_from(hidden.select(0, rows[r]));
  }
  const Tensor logits = model_.compute_logits(selected);
  output.logits = logits.device().is_cpu() ? logits : logits.to(Device::cpu());
  return output;
}

}  // namespace pagoda
