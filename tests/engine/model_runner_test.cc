#include "engine/model_runner.h"

#include <gtest/gtest.h>

#include "kv/kv_test_configs.h"

namespace pagoda {
namespace {

using namespace pagoda::testing;

// Records the batch it was given instead of computing.
class RecordingModel final : public CausalLm {
 public:
  Tensor forward(const ForwardBatch& batch) override {
    seen = batch;
    Tensor hidden = Tensor::empty({static_cast<int64_t>(batch.token_ids.size()), 1}, DType::kF32);
    for (size_t t = 0; t < batch.token_ids.size(); ++t)
      hidden.data<float>()[t] = batch.token_ids[t];
    return hidden;
  }
  Tensor compute_logits(const Tensor& hidden) override { return hidden.clone(); }
  ForwardBatch seen;
};

TEST(ModelRunnerTest, BuildsMetadataWithDecodesFirst) {
  const ModelConfig model = model_of({full_layer(1, 16), sliding_layer(1, 8, 64)});
  const KvCachePlan plan = plan_kv_cache(kv_layers(model), {.num_blocks = 20, .max_model_len = 64});
  const KvCache cache = allocate_kv_cache(plan, Device::cpu());
  KvCacheManager blocks(plan);
  const int32_t prefill_row = blocks.add_request();
  const int32_t decode_row = blocks.add_request();
  blocks.allocate_slots(prefill_row, 20);  // a prefill chunk of 4 after 16 cached
  blocks.allocate_slots(decode_row, 33);   // a decode at position 32
  RecordingModel recorder;
  ModelRunner runner(recorder, plan, cache);
  std::vector<int32_t> prefill_tokens(16, 1);
  prefill_tokens.insert(prefill_tokens.end(), {10, 11, 12, 13});
  std::vector<int32_t> decode_tokens(32, 1);
  decode_tokens.push_back(20);
  Request prefill(0, prefill_tokens, {}, 0);
  Request decode(1, decode_tokens, {}, 0);
  prefill.kv_row = prefill_row;
  decode.kv_row = decode_row;
  const std::vector<ScheduledChunk> chunks = {{&prefill, 16, 4}, {&decode, 32, 1}};
  const std::vector<int64_t> logits_rows = {4, 1};
  const RunnerOutput output = runner.execute(chunks, logits_rows, blocks);
  const ForwardBatch& seen = recorder.seen;
  EXPECT_EQ(seen.token_ids, (std::vector<int32_t>{20, 10, 11, 12, 13}));  // the decode first
  EXPECT_EQ(seen.positions, (std::vector<int64_t>{32, 16, 17, 18, 19}));
  ASSERT_EQ(plan.groups.size(), 2u);
  const AttentionMetadata& full = runner.metadata(0);
  EXPECT_EQ(full.num_decode_seqs, 1);
  EXPECT_EQ(full.num_decode_tokens, 1);
  EXPECT_EQ(full.query_start, (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(full.seq_lens, (std::vector<int64_t>{33, 20}));
  const std::span<const int32_t> decode_blocks = blocks.block_ids(decode_row, 0);
  const std::span<const int32_t> prefill_blocks = blocks.block_ids(prefill_row, 0);
  EXPECT_EQ(full.slot_mapping[0], int64_t{decode_blocks[2]} * 16 + 0);
  EXPECT_EQ(full.slot_mapping[1], int64_t{prefill_blocks[1]} * 16 + 0);
  // Each sequence's table row is its request's row of the manager's table, in execution order.
  EXPECT_EQ(full.block_table_stride, 4);  // 64 tokens in blocks of 16
  ASSERT_EQ(full.block_table_rows.size(), 2u);
  EXPECT_TRUE(std::equal(decode_blocks.begin(), decode_blocks.end(), full.blocks_of(0)));
  EXPECT_TRUE(std::equal(prefill_blocks.begin(), prefill_blocks.end(), full.blocks_of(1)));
  const AttentionMetadata& sliding = runner.metadata(1);
  EXPECT_EQ(sliding.slot_mapping[1], int64_t{blocks.block_ids(prefill_row, 1)[0]} * 32 + 16);
  // Logits: every row of the prefill (it asked for all), the last of the decode; caller's order.
  ASSERT_EQ(output.logits.size(0), 5);
  for (int64_t row = 0; row < 4; ++row)
    EXPECT_EQ(output.logits.at<float>({output.first_row[0] + row, 0}), 10.0f + row);
  EXPECT_EQ(output.logits.at<float>({output.first_row[1], 0}), 20.0f);
}

}  // namespace
}  // namespace pagoda
