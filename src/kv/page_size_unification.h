// One pool, one page size (DESIGN.md §2). Let P be the largest page among owning layers. A page p
// is kept when p == P, scaled (block size × P/p) when P is a multiple of p, else padded to P with
// its block size unchanged — only when every backend reading it indexes KV by block stride.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_layers.h"

namespace pagoda {

enum class PageAction { kKept, kScaled, kPadded };

std::string_view page_action_name(PageAction action);  // "kept", "scaled", "padded"

// What happened to the layers that shared one spec before unification.
struct PageDecision {
  std::vector<int64_t> layers;  // indices into the KvLayer list
  KvSpec before;
  KvSpec after;
  PageAction action = PageAction::kKept;
  int64_t scale = 1;  // block-size factor when scaled

  double waste_fraction() const;  // padding bytes / physical page bytes
};

struct PageUnification {
  int64_t page_bytes = 0;               // the pool's physical page size P
  std::vector<PageDecision> decisions;  // one per distinct spec, in layer order
};

// Rewrites the specs of the owning layers in place. Throws Error when a page must be padded and a
// backend reading it lacks block-stride indexing, naming the layers, both page sizes and the
// backend.
PageUnification unify_page_sizes(std::vector<KvLayer>& layers);

}  // namespace pagoda
