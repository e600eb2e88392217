// Which drafted tokens a verify step keeps. The target scores 1+K positions for a request: its
// rows 0..K-1 judge drafts 0..K-1, and the row after the last kept draft gives one more token (the
// correction of the first rejected draft, or a bonus when all K are kept). Greedy requests keep a
// draft while it is the target's argmax. Sampling requests use the lossless rule: keep draft d
// with probability min(1, p(d)/q(d)); at the first rejection draw from max(0, p - q), normalised.
// The tokens that come out then follow the target's distribution exactly, whatever the drafter
// proposes. p and q are the target's and the drafter's distributions after the request's
// temperature, min-p, top-k and top-p.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"

namespace pagoda {

struct Acceptance {
  int64_t accepted = 0;  // drafts kept, 0..K
  int32_t next = 0;      // the token after them: a correction, or the bonus when all were kept
};

// The draws a verify step takes for a sampling request: K + 1 uniforms from `rng` whatever is kept
// (the judge of each draft, then the draw of the token after the kept ones), so a device that
// judges every draft at once takes the same stream as the host. None for a greedy request; with no
// drafts, the one draw of the next token.
std::vector<double> acceptance_draws(const SamplingParams& params, int64_t num_drafts,
                                     SamplerRng& rng);

// target_rows: K+1 rows of the target's logits; draft_rows: the K rows of the drafter's logits
// that the drafts were drawn from (unused when greedy); drafts: the K drafted tokens; draws: from
// acceptance_draws().
Acceptance accept_drafts(std::span<const float* const> target_rows,
                         std::span<const float* const> draft_rows, std::span<const int32_t> drafts,
                         int64_t vocab, const SamplingParams& params,
                         std::span<const double> draws);

}  // namespace pagoda
