// The KV spec of an attention layer that owns KV (DESIGN.md §2).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attention/kv_layout.h"
#include "model/model_config.h"

namespace pagoda {

struct KvSpec {
  AttentionKind kind = AttentionKind::kFull;
  int64_t sliding_window = 0;  // tokens; sliding specs only
  KvPageShape page;
  // The physical page size when larger than page.page_bytes() (padded to the pool's page).
  std::optional<int64_t> padded_page_bytes;
  // Whether every backend reading layers of this spec walks pages by a runtime block stride.
  bool indexes_kv_by_block_stride = false;
  // Decode context parallelism: the ranks a sequence's tokens are dealt over. A block id then
  // covers page.block_size tokens on each of them.
  int64_t context_ranks = 1;

  // Tokens of one sequence that one block id covers.
  int64_t block_tokens() const { return page.block_size * context_ranks; }

  int64_t real_page_bytes() const { return page.page_bytes(); }
  int64_t page_bytes() const { return padded_page_bytes.value_or(real_page_bytes()); }
  // The most blocks one sequence of `num_tokens` tokens holds at once in this spec's group when a
  // step computes at most `tokens_per_step` of its tokens: every block for full attention; for
  // sliding attention, those the window reaches from the step's first query plus the step's own
  // (a step writes all its tokens before the blocks its window has passed are freed).
  int64_t blocks_for_tokens(int64_t num_tokens, int64_t tokens_per_step) const;

  bool operator==(const KvSpec&) const = default;
};

// One spec for layers placed in one group. They must agree on kind, window, page shape and padding;
// the block-stride capability holds only if it holds for every one. Throws InternalError when the
// specs differ in anything else.
KvSpec merge_kv_specs(const std::vector<KvSpec>& specs);

}  // namespace pagoda
