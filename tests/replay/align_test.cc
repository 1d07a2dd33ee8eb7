// alignSequences: a minimal edit script on random sequences with random edits, checked against an
// O(NM) dynamic-programming LCS; and the bounded fallback on unrelated sequences.
#include "detrace/replay/align.h"

#include <span>

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
    if (p.a >= 0) {
      ASSERT_EQ(p.a, next_a++);
    }
    if (p.b >= 0) {
      ASSERT_EQ(p.b, next_b++);
    }
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

// Aligns a and b the way a diff reads runs: windows of `window` keys past what is aligned, widened
// while alignWindow() cannot settle anything.
Alignment alignByWindows(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b,
                         size_t window) {
  Alignment out;
  size_t x = 0, y = 0, w = window;
  while (x < a.size() || y < b.size()) {
    size_t xe = std::min(a.size(), x + w), ye = std::min(b.size(), y + w);
    std::span<const uint64_t> wa(a.data() + x, xe - x), wb(b.data() + y, ye - y);
    WindowAlignment al = alignWindow(wa, wb, xe == a.size(), ye == b.size());
    if (al.pairs.empty()) {
      w *= 2;
      continue;
    }
    for (const AlignedPair& p : al.pairs) {
      out.pairs.push_back({p.a < 0 ? -1 : static_cast<int64_t>(x) + p.a,
                           p.b < 0 ? -1 : static_cast<int64_t>(y) + p.b});
    }
    out.edits += al.edits;
    x += static_cast<size_t>(al.used_a);
    y += static_cast<size_t>(al.used_b);
    w = window;
  }
  return out;
}

TEST(Align, WindowByWindowIsTheWholeAlignmentWhenTheRunsFallBackIntoStep) {
  testing::Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint64_t> a(4000);
    for (auto& x : a) x = rng.u64() % 100000;
    // Clusters of up to 3 insertions or deletions, at least 40 keys apart.
    std::vector<uint64_t> b;
    for (size_t i = 0; i < a.size();) {
      size_t run = static_cast<size_t>(rng.range(40, 300));
      for (size_t k = 0; k < run && i < a.size(); ++k) b.push_back(a[i++]);
      for (int64_t e = rng.range(1, 3); e > 0; --e) {
        if (rng.range(0, 1) && i < a.size()) {
          ++i;  // deleted from B
        } else {
          b.push_back(rng.u64() % 100000);  // inserted into B
        }
      }
    }
    Alignment whole = alignSequences(a, b);
    for (size_t window : {16, 100, 1000}) {
      Alignment windows = alignByWindows(a, b, window);
      ASSERT_EQ(windows.pairs, whole.pairs) << "trial " << trial << ", window " << window;
      ASSERT_EQ(windows.edits, whole.edits);
    }
  }
}

TEST(Align, WindowsNeverSettleOnAFewEqualKeysAtTheirEnd) {
  // B has three extra keys; A's window ends two keys after the difference: aligning A's last
  // keys with B's there would be an accident of where the window ends.
  std::vector<uint64_t> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint64_t> b = {1, 2, 9, 9, 9, 3, 4, 5, 6, 7, 8};
  WindowAlignment al = alignWindow(std::span(a).first(4), b, false, false);
  EXPECT_EQ(al.used_a, 2) << "only the common prefix is settled";
  EXPECT_EQ(al.used_b, 2);
}

}  // namespace
}  // namespace detrace::replay
