#include "kv/kv_groups.h"

#include <algorithm>

#include "core/error.h"

namespace pagoda {

std::vector<KvGroup> group_kv_layers(const std::vector<KvLayer>& layers) {
  // Layers with identical specs, in layer order.
  std::vector<std::vector<int64_t>> same_spec;
  std::vector<KvSpec> specs;
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    if (!layers[i].owns_kv()) continue;
    const auto it = std::find(specs.begin(), specs.end(), *layers[i].spec);
    if (it == specs.end()) {
      specs.push_back(*layers[i].spec);
      same_spec.push_back({i});
    } else {
      same_spec[it - specs.begin()].push_back(i);
    }
  }
  PAGODA_CHECK(!same_spec.empty(), "no layer owns KV");

  // Group size: the smallest set of same-spec layers, so no tensor slot is wasted for it — unless
  // the sets are nearly equal, when one group per set wastes less than many small groups.
  size_t smallest = same_spec.front().size();
  size_t largest = smallest;
  for (const auto& set : same_spec) {
    smallest = std::min(smallest, set.size());
    largest = std::max(largest, set.size());
  }
  const size_t group_size = largest * 4 < smallest * 5 ? largest : smallest;

  std::vector<KvGroup> groups;
  for (size_t s = 0; s < same_spec.size(); ++s) {
    const std::vector<int64_t>& set = same_spec[s];
    for (size_t start = 0; start < set.size(); start += group_size) {
      KvGroup group;
      group.layers.assign(set.begin() + start,
                          set.begin() + std::min(set.size(), start + group_size));
      std::vector<KvSpec> group_specs;
      for (int64_t i : group.layers)
        group_specs.push_back(*layers[i].spec);
      group.spec = merge_kv_specs(group_specs);
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

int64_t slots_per_block(const std::vector<KvGroup>& groups) {
  size_t slots = 0;
  for (const KvGroup& group : groups)
    slots = std::max(slots, group.layers.size());
  return static_cast<int64_t>(slots);
}

}  // namespace pagoda
