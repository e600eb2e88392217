// Two small f32 page shapes that the KV layout and backend tests share: K and V rows of one width
// (kEqual) and of two (kSplit, K wider than V).
#pragma once

#include "attention/kv_layout.h"

namespace pagoda::testing {

inline const KvPageShape kEqual{
    .block_size = 4, .num_kv_heads = 2, .head_size_k = 8, .head_size_v = 8, .dtype = DType::kF32};
inline const KvPageShape kSplit{
    .block_size = 4, .num_kv_heads = 2, .head_size_k = 12, .head_size_v = 8, .dtype = DType::kF32};

}  // namespace pagoda::testing
