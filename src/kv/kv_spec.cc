#include "kv/kv_spec.h"

#include "core/error.h"

namespace pagoda {

int64_t KvSpec::blocks_for_tokens(int64_t num_tokens) const {
  const int64_t all = (num_tokens + page.block_size - 1) / page.block_size;
  if (kind == AttentionKind::kFull) return all;
  // The newest token sees window - 1 earlier tokens; they span at most this many blocks.
  const int64_t reachable = (sliding_window - 1 + page.block_size - 1) / page.block_size + 1;
  return std::min(all, reachable);
}

KvSpec merge_kv_specs(const std::vector<KvSpec>& specs) {
  PAGODA_CHECK(!specs.empty(), "merging no KV specs");
  KvSpec merged = specs.front();
  for (const KvSpec& spec : specs) {
    PAGODA_CHECK(spec.kind == merged.kind && spec.sliding_window == merged.sliding_window &&
                     spec.page == merged.page && spec.padded_page_bytes == merged.padded_page_bytes,
                 "KV specs of one group differ");
    merged.indexes_kv_by_block_stride =
        merged.indexes_kv_by_block_stride && spec.indexes_kv_by_block_stride;
  }
  return merged;
}

}  // namespace pagoda
