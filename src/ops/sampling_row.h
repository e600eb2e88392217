// One row's sampling on a device: the parameters of SamplingParams that act on the logits, and
// the row's draw. A row may also judge a drafted token (speculative decoding, with the rule of
// engine/spec_acceptance.h): it keeps the draft, or draws the token that replaces it.
#pragma once

#include <cstdint>

namespace pagoda {

struct SamplingRow {
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;
  double min_p = 0.0;
  double uniform = 0.0;  // in [0, 1): the draw (for a row judging a draft: at its rejection)
  int64_t top_k = 0;     // 0: no limit
  // The drafted token this row judges, or -1; the row of the drafter's logits it was drawn from
  // (sampling rows only); and the draw in [0, 1) that judges it (sampling rows only). A greedy row
  // keeps its draft when it is the argmax.
  int32_t draft = -1;
  int64_t draft_row = -1;
  double judge = 0.0;
};

}  // namespace pagoda
