// One row's sampling on a device: the parameters of SamplingParams that act on the logits, and
// the row's draw.
#pragma once

#include <cstdint>

namespace pagoda {

struct SamplingRow {
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;
  double min_p = 0.0;
  double uniform = 0.0;  // in [0, 1)
  int64_t top_k = 0;     // 0: no limit
};

}  // namespace pagoda
