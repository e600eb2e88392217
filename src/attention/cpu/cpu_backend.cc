#include "attention/cpu/cpu_backend.h"

namespace pagoda {

const AttentionBackend& cpu_attention_backend() {
  static const PagedAttentionBackend backend("cpu", PageOrder::kNhd, kAllAttentionFeatures);
  return backend;
}

}  // namespace pagoda
