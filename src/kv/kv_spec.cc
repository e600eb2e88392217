#include "kv/kv_spec.h"

#include "core/error.h"

namespace pagoda {

int64_t KvSpec::blocks_for_tokens(int64_t num_tokens, int64_t tokens_per_step) const {
  const int64_t block = block_tokens();
  const int64_t all = (num_tokens + block - 1) / block;
  if (kind == AttentionKind::kFull) return all;
  // A step of c tokens after n computed ones holds blocks from the one with token
  // n - window + 1 (those before were freed after the last step) to the one with token n + c - 1:
  // window + c - 1 tokens, which span at most 1 + ceil((window + c - 2) / block) blocks.
  const int64_t step = std::clamp<int64_t>(tokens_per_step, 1, std::max<int64_t>(num_tokens, 1));
  const int64_t reachable = 1 + (sliding_window + step - 2 + block - 1) / block;
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
