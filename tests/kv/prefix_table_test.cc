#include "kv/prefix_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"

namespace pagoda {
namespace {

// Random inserts, finds and erases against a std::map, with hashes drawn from few values so that
// probes collide, run long and wrap around the table's end.
TEST(PrefixTableTest, MatchesAMapUnderCollisions) {
  constexpr int64_t kEntries = 24;  // 64 slots
  PrefixTable table(kEntries);
  std::map<std::pair<BlockHash, int64_t>, int32_t> expected;
  std::mt19937_64 rng(5);
  for (int op = 0; op < 20000; ++op) {
    // Hashes that share their low bits land on the same few homes, and near the table's end.
    const BlockHash hash = (rng() % 6) * 64 + 60 + (rng() % 3);
    const int64_t group = static_cast<int64_t>(rng() % 2);
    const auto key = std::pair{hash, group};
    const auto it = expected.find(key);
    switch (rng() % 3) {
      case 0:
        if (static_cast<int64_t>(expected.size()) < kEntries || it != expected.end()) {
          const int32_t block = static_cast<int32_t>(op);
          EXPECT_EQ(table.insert(hash, group, block), it == expected.end());
          if (it == expected.end()) expected[key] = block;
        }
        break;
      case 1:
        if (it != expected.end()) {
          table.erase(hash, group);
          expected.erase(it);
        }
        break;
      default:
        EXPECT_EQ(table.find(hash, group),
                  it == expected.end() ? std::nullopt : std::optional<int32_t>(it->second));
    }
    ASSERT_EQ(table.size(), static_cast<int64_t>(expected.size()));
  }
  for (const auto& [key, block] : expected)
    EXPECT_EQ(table.find(key.first, key.second), block);
}

TEST(PrefixTableTest, ErrorsAreInternal) {
  PrefixTable table(1);
  EXPECT_TRUE(table.insert(7, 0, 3));
  EXPECT_FALSE(table.insert(7, 0, 4));  // present: left as it is
  EXPECT_EQ(table.find(7, 0), 3);
  EXPECT_EQ(table.find(7, 1), std::nullopt);
  EXPECT_THROW(table.insert(8, 0, 5), InternalError);  // full
  EXPECT_THROW(table.erase(9, 0), InternalError);      // absent
}

}  // namespace
}  // namespace pagoda
