#include "engine/spec_acceptance.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace pagoda {
namespace {

int32_t argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

// A draw from max(0, p - q) normalised: the mass p has where q falls short. When p ≤ q everywhere
// (they are equal), p itself.
int32_t draw_residual(const FilteredDistribution& p, const FilteredDistribution& q,
                      double uniform) {
  std::vector<double> residual(p.keep);
  double total = 0;
  for (int64_t i = 0; i < p.keep; ++i) {
    const int32_t token = p.order[i];
    total += residual[i] = std::max(0.0, p.probs[token] / p.mass - q.probability(token));
  }
  if (total <= 0) return p.draw(uniform);
  double target = uniform * total;
  for (int64_t i = 0; i < p.keep; ++i) {
    target -= residual[i];
    if (target < 0) return p.order[i];
  }
  // Rounding left a sliver: the last token with residual mass.
  for (int64_t i = p.keep - 1; i > 0; --i) {
    if (residual[i] > 0) return p.order[i];
  }
  return p.order[0];
}

}  // namespace

std::vector<double> acceptance_draws(const SamplingParams& params, int64_t num_drafts,
                                     SamplerRng& rng) {
  std::vector<double> draws;
  if (params.greedy()) return draws;
  for (int64_t j = 0; j <= num_drafts; ++j)
    draws.push_back(rng.uniform());
  return draws;
}

Acceptance accept_drafts(std::span<const float* const> target_rows,
                         std::span<const float* const> draft_rows, std::span<const int32_t> drafts,
                         int64_t vocab, const SamplingParams& params,
                         std::span<const double> draws) {
  const int64_t k = static_cast<int64_t>(drafts.size());
  PAGODA_CHECK(static_cast<int64_t>(target_rows.size()) == k + 1, "{} target rows for {} drafts",
               target_rows.size(), k);
  Acceptance out;
  if (params.greedy()) {
    while (out.accepted < k && drafts[out.accepted] == argmax(target_rows[out.accepted], vocab))
      ++out.accepted;
    out.next = argmax(target_rows[out.accepted], vocab);
    return out;
  }
  PAGODA_CHECK(
      static_cast<int64_t>(draft_rows.size()) == k && static_cast<int64_t>(draws.size()) == k + 1,
      "{} draft rows and {} draws for {} drafts", draft_rows.size(), draws.size(), k);
  const double next = draws[k];
  for (; out.accepted < k; ++out.accepted) {
    const FilteredDistribution p = filter_distribution(target_rows[out.accepted], vocab, params);
    const FilteredDistribution q = filter_distribution(draft_rows[out.accepted], vocab, params);
    const int32_t draft = drafts[out.accepted];
    const double p_draft = p.probability(draft);
    const double q_draft = q.probability(draft);
    // q_draft is 0 only for a draft the drafter's own filters exclude: never kept.
    if (q_draft > 0 && draws[out.accepted] * q_draft < p_draft) continue;
    out.next = draw_residual(p, q, next);
    return out;
  }
  out.next = filter_distribution(target_rows[k], vocab, params).draw(next);
  return out;
}

}  // namespace pagoda
