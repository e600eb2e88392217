// KV cache groups (DESIGN.md §2): layers with identical specs, cut into groups of equal size so
// that group g's i-th layer and every other group's i-th layer share one tensor. Block id b is the
// same page slot in every group's tensors; a block belongs to one group at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_layers.h"

namespace pagoda {

struct KvGroup {
  KvSpec spec;                  // merged spec of the layers
  std::vector<int64_t> layers;  // indices into the KvLayer list; layer j uses tensor slot j
};

// Groups the owning layers (after page-size unification). Full and sliding layers never share a
// group. Every group has at most slots_per_block(groups) layers.
std::vector<KvGroup> group_kv_layers(const std::vector<KvLayer>& layers);

// The number of tensors that share a block id: the size of the largest group.
int64_t slots_per_block(const std::vector<KvGroup>& groups);

}  // namespace pagoda
