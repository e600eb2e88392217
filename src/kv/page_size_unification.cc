#include "kv/page_size_unification.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace pagoda {
namespace {

std::vector<std::string> layer_names(const std::vector<KvLayer>& layers,
                                     const std::vector<int64_t>& indices) {
  std::vector<std::string> names;
  for (int64_t i : indices)
    names.push_back(layers[i].name);
  return names;
}

const AttentionBackend* backend_without_block_stride(const std::vector<KvLayer>& layers,
                                                     const std::vector<int64_t>& indices) {
  for (int64_t i : indices) {
    if (!layers[i].spec->indexes_kv_by_block_stride) {
      return layers[i].backend;
    }
  }
  return nullptr;
}

}  // namespace

std::string_view page_action_name(PageAction action) {
  switch (action) {
    case PageAction::kKept:
      return "kept";
    case PageAction::kScaled:
      return "scaled";
    case PageAction::kPadded:
      return "padded";
  }
  return "?";
}

double PageDecision::waste_fraction() const {
  const double physical = static_cast<double>(after.page_bytes());
  return physical == 0 ? 0.0 : (physical - after.real_page_bytes()) / physical;
}

PageUnification unify_page_sizes(std::vector<KvLayer>& layers) {
  PageUnification result;
  // Distinct specs in layer order, each with the layers that carry it.
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    if (!layers[i].owns_kv()) continue;
    auto same = std::find_if(result.decisions.begin(), result.decisions.end(),
                             [&](const PageDecision& d) { return d.before == *layers[i].spec; });
    if (same == result.decisions.end()) {
      result.decisions.push_back({.layers = {}, .before = *layers[i].spec});
      same = std::prev(result.decisions.end());
    }
    same->layers.push_back(i);
  }
  PAGODA_CHECK(!result.decisions.empty(), "no layer owns KV");
  const PageDecision* largest = &result.decisions.front();
  for (const PageDecision& decision : result.decisions) {
    if (decision.before.page_bytes() > largest->before.page_bytes()) largest = &decision;
  }
  result.page_bytes = largest->before.page_bytes();
  const std::vector<std::string> largest_names = layer_names(layers, largest->layers);

  for (PageDecision& decision : result.decisions) {
    const int64_t page = decision.before.page_bytes();
    decision.after = decision.before;
    if (page == result.page_bytes) {
      decision.action = PageAction::kKept;
    } else if (result.page_bytes % page == 0) {
      decision.action = PageAction::kScaled;
      decision.scale = result.page_bytes / page;
      decision.after.page.block_size *= decision.scale;
    } else {
      if (const AttentionBackend* backend = backend_without_block_stride(layers, decision.layers)) {
        fail(
            "cannot put KV pages of {} bytes (layers {}) in a pool of {}-byte pages (layers {}): "
            "{} is not a multiple of {}, so they must be padded, and attention backend '{}' does "
            "not index KV by block stride",
            page, fmt::join(layer_names(layers, decision.layers), ", "), result.page_bytes,
            fmt::join(largest_names, ", "), result.page_bytes, page, backend->name());
      }
      decision.action = PageAction::kPadded;
      decision.after.padded_page_bytes = result.page_bytes;
    }
    for (int64_t i : decision.layers)
      layers[i].spec = decision.after;
  }
  return result;
}

}  // namespace pagoda
