#include "attention/cuda/cta_place.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace pagoda::cuda {
namespace {

// Every CTA of a grid takes a different (sequence, KV head, tile), and every one is taken.
TEST(CtaPlaceTest, EachPlaceOnce) {
  for (const auto& [seqs, heads, tiles] :
       {std::tuple{1, 8, 64}, std::tuple{1, 1, 5}, std::tuple{3, 8, 16}, std::tuple{16, 2, 1},
        std::tuple{7, 4, 33}}) {
    std::set<std::tuple<int, int, int>> seen;
    for (int z = 0; z < seqs; ++z) {
      for (int x = 0; x < heads * tiles; ++x) {
        const CtaPlace p = cta_place(x, z, heads * tiles, seqs, heads);
        ASSERT_EQ(p.seq, z);
        ASSERT_TRUE(p.kv_head >= 0 && p.kv_head < heads) << p.kv_head;
        ASSERT_TRUE(p.tile >= 0 && p.tile < tiles) << p.tile;
        ASSERT_EQ(p.tiles, tiles);
        seen.insert({p.seq, p.kv_head, p.tile});
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(seqs * heads * tiles));
  }
}

// The order the CTAs start in: a lone sequence's heads fastest; over several sequences, one
// (sequence, KV head)'s tiles together.
TEST(CtaPlaceTest, Order) {
  for (int x = 0; x < 8; ++x) {
    EXPECT_EQ(cta_place(x, 0, 8 * 4, 1, 8).kv_head, x);
    EXPECT_EQ(cta_place(x, 0, 8 * 4, 1, 8).tile, 0);
  }
  for (int x = 0; x < 4; ++x) {
    EXPECT_EQ(cta_place(x, 1, 8 * 4, 2, 8).kv_head, 0);
    EXPECT_EQ(cta_place(x, 1, 8 * 4, 2, 8).tile, x);
  }
}

}  // namespace
}  // namespace pagoda::cuda
