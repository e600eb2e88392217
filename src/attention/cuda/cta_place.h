// Which part of an attention launch a CTA takes: the launch's grid is x = tiles x KV heads (a tile
// is a head's (row tile, split, V slice)) and z = sequences. Plain C++, so that the host's tests
// check the mapping the kernels use.
#pragma once

#include "core/fast_divisor.h"  // PAGODA_HOST_DEVICE

namespace pagoda::cuda {

struct CtaPlace {
  int seq;      // of the launch's sequences
  int kv_head;  // of num_kv_heads
  int tile;     // of tiles
  int tiles;    // a head's: grid_x / num_kv_heads
};

// The CTAs that run side by side share pages in L2. Over several sequences, one (sequence, KV
// head)'s tiles come together: on an H100 that took 0.68-0.89x the time of launches with the
// sequence fastest (the producer warpgroup's CTAs at 16 x 2k, 4 x 8k and 8 x 2k tokens after 14k
// cached). A lone sequence's pages serve every CTA, so there the heads come fastest and the first
// wave takes each head's longest row tiles: 0.95x the time of its heads one after the other at 8k
// tokens, while the same order over 16 sequences took 1.06x.
PAGODA_HOST_DEVICE inline CtaPlace cta_place(int x, int z, int grid_x, int grid_z,
                                             int num_kv_heads) {
  const int tiles = grid_x / num_kv_heads;
  if (grid_z == 1) return {z, x % num_kv_heads, x / num_kv_heads, tiles};
  return {z, x / tiles, x % tiles, tiles};
}

}  // namespace pagoda::cuda
