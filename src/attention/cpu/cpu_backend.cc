#include "attention/cpu/cpu_backend.h"

namespace pagoda {

const AttentionBackend& cpu_attention_backend() {
  static const PagedAttentionBackend backend("cpu", PageOrder::kNhd,
                                             AttentionFeatures{.sliding_window = true,
                                                               .logit_softcap = true,
                                                               .attention_sinks = true,
                                                               .split_kv_head_sizes = true,
                                                               .cache_only_queries = true});
  return backend;
}

}  // namespace pagoda
