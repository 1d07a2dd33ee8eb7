// alignSequences: a minimal edit script on random sequences with random edits, checked against an
// O(NM) dynamic-programming LCS; and the bounded fallback on unrelated sequences.
#include "detrace/replay/align.h"

#include <gtest/gtest.h>

#include "../db/test_util.h"

namespace detrace::replay {
namespace {

int64_t lcsLength(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::vector<int64_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Every index appears once, in order; matched pairs have equal keys.
void checkWellFormed(const Alignment& al, const std::vector<uint64_t>& a,
                     const std::vector<uint64_t>& b) {
  int64_t next_a = 0, next_b = 0;
  for (const AlignedPair& p : al.pairs) {
    if (p.a >= 0) ASSERT_EQ(p.a, next_a++);
    if (p.b >= 0) ASSERT_EQ(p.b, next_b++);
    ASSERT_TRUE(p.a >= 0 || p.b >= 0);
    if (al.exact && p.a >= 0 && p.b >= 0) {
      ASSERT_EQ(a[static_cast<size_t>(p.a)], b[static_cast<size_t>(p.b)]);
    }
  }
  EXPECT_EQ(next_a, static_cast<int64_t>(a.size()));
  EXPECT_EQ(next_b, static_cast<int64_t>(b.size()));
}

TEST(Align, MinimalEditScriptOnRandomEdits) {
  testing::Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint64_t> a;
    int64_t n = rng.range(0, 300);
    for (int64_t i = 0; i < n; ++i) a.push_back(static_cast<uint64_t>(rng.range(0, 12)));
    std::vector<uint64_t> b = a;
    for (int64_t e = rng.range(0, 30); e > 0; --e) {
      int64_t pos = rng.range(0, static_cast<int64_t>(b.size()));
      if (rng.range(0, 1) && !b.empty() && pos < static_cast<int64_t>(b.size())) {
        b.erase(b.begin() + pos);
      } else {
        b.insert(b.begin() + pos, static_cast<uint64_t>(rng.range(0, 12)));
      }
    }
    Alignment al = alignSequences(a, b);
    ASSERT_TRUE(al.exact);
    checkWellFormed(al, a, b);
    int64_t matched = 0;
    for (const auto& p : al.pairs) matched += p.a >= 0 && p.b >= 0;
    ASSERT_EQ(matched, lcsLength(a, b)) << "trial " << trial;
    ASSERT_EQ(al.edits, static_cast<int64_t>(a.size() + b.size()) - 2 * matched);
  }
}

TEST(Align, NearlyIdenticalLongStreamsAreCheap) {
  testing::Rng rng;
  std::vector<uint64_t> a(2'000'000);
  for (auto& x : a) x = rng.u64() % 64;
  std::vector<uint64_t> b = a;
  b.insert(b.begin() + 1'000'000, 999);  // one extra kernel in B
  b.erase(b.begin() + 1'500'000);        // one missing in B
  Alignment al = alignSequences(a, b);
  EXPECT_TRUE(al.exact);
  EXPECT_EQ(al.edits, 2);
  checkWellFormed(al, a, b);
}

TEST(Align, UnrelatedSequencesFallBackWithinBudget) {
  testing::Rng rng;
  std::vector<uint64_t> a(5000), b(4000);
  for (auto& x : a) x = rng.u64();
  for (auto& x : b) x = rng.u64();
  Alignment al = alignSequences(a, b, 64);
  EXPECT_FALSE(al.exact);
  checkWellFormed(al, a, b);
  EXPECT_EQ(al.pairs.size(), 5000u);
}

}  // namespace
}  // namespace detrace::replay
