// Attention metadata: built once per step for each KV cache group and read by every layer of it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

// Token order is decodes first: [0, num_decode_tokens) are the one-token queries of decoding
// sequences, then prefill chunks. Rows at and past num_actual_tokens are padding.
struct AttentionMetadata {
  int64_t num_actual_tokens = 0;
  int64_t num_decode_tokens = 0;
  std::vector<int64_t>
      query_start;  // [num_seqs + 1]: sequence s has query rows [start[s], start[s+1])
  std::vector<int64_t> seq_lens;  // [num_seqs]: tokens in the cache after this step's writes
  // Block tables, row-major with rows of block_table_stride entries; sequence s's block ids start
  // at row block_table_rows[s]. Rows need not be in sequence order: the table is the KV cache
  // manager's persistent one, not a per-step copy.
  std::span<const int32_t> block_table;
  int64_t block_table_stride = 0;
  std::vector<int32_t> block_table_rows;  // [num_seqs]
  std::vector<int64_t> slot_mapping;  // [num_actual_tokens]: block * block_size + offset; -1 skips

  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  const int32_t* blocks_of(int64_t seq) const {
    return block_table.data() + block_table_rows[seq] * block_table_stride;
  }
};

}  // namespace pagoda
