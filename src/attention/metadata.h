// Attention metadata: built once per step for each KV cache group and read by every layer of it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagoda {

// The most query rows of a decoding sequence: its newest token and up to 16 drafts to verify.
inline constexpr int64_t kMaxDecodeQueryLen = 17;

// Decode context parallelism as one rank's attention sees it: a sequence's tokens are dealt to
// `size` ranks, `interleave` at a time, and each rank keeps the tokens it is dealt, in order, in
// its pages of the sequence's blocks (block b of a sequence's table holds its local tokens
// [b * block_size, (b + 1) * block_size) on every rank). One rank: every token, where it is.
struct ContextShard {
  int64_t rank = 0;
  int64_t size = 1;
  int64_t interleave = 1;

  bool owns(int64_t position) const { return position / interleave % size == rank; }
  // Where an owned position sits among this rank's tokens of its sequence.
  int64_t local_index(int64_t position) const {
    return position / (interleave * size) * interleave + position % interleave;
  }
};

// Sequence order is decodes first: the first num_decode_seqs sequences decode, each with at most
// kMaxDecodeQueryLen query rows after a non-empty cache (one token, or a token and the drafts that
// follow it), [0, num_decode_tokens) of the rows; then prefill chunks. Rows at and past
// num_actual_tokens are padding.
struct AttentionMetadata {
  int64_t num_actual_tokens = 0;
  int64_t num_decode_seqs = 0;
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
  ContextShard context;               // the rank's share of every sequence's tokens

  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  // The query rows of each decoding sequence when they all have as many (a CUDA graph's step, whose
  // padding sequences get as many too); 1 without decodes.
  int64_t decode_query_len() const {
    return num_decode_seqs > 0 ? num_decode_tokens / num_decode_seqs : 1;
  }
  const int32_t* blocks_of(int64_t seq) const {
    return block_table.data() + block_table_rows[seq] * block_table_stride;
  }
};

}  // namespace pagoda
