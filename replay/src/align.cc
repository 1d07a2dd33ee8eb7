#include "detrace/replay/align.h"

#include <algorithm>

namespace detrace::replay {
namespace {

// Myers' greedy forward search on a[0..n) vs b[0..m). Returns false if more than max_d edits are
// needed; otherwise appends the aligned pairs (offset by a0, b0) to out.
bool myers(std::span<const uint64_t> a, std::span<const uint64_t> b, int64_t a0, int64_t b0,
           int64_t max_d, std::vector<AlignedPair>& out, int64_t& edits) {
  const int64_t n = static_cast<int64_t>(a.size()), m = static_cast<int64_t>(b.size());
  const int64_t limit = std::min(max_d, n + m);
  const int64_t offset = limit + 1;
  std::vector<int64_t> v(static_cast<size_t>(2 * offset + 1), 0);
  // v[-d..d] after each d, for the backtrack: O(D^2) memory in all.
  std::vector<std::vector<int64_t>> trace;
  int64_t found_d = -1;
  for (int64_t d = 0; d <= limit && found_d < 0; ++d) {
    for (int64_t k = -d; k <= d; k += 2) {
      auto at = [&](int64_t kk) -> int64_t& { return v[static_cast<size_t>(kk + offset)]; };
      int64_t x = (k == -d || (k != d && at(k - 1) < at(k + 1))) ? at(k + 1) : at(k - 1) + 1;
      int64_t y = x - k;
      while (x < n && y < m && a[static_cast<size_t>(x)] == b[static_cast<size_t>(y)]) ++x, ++y;
      at(k) = x;
      if (x >= n && y >= m) {
        found_d = d;
        break;
      }
    }
    trace.emplace_back(v.begin() + (offset - d), v.begin() + (offset + d + 1));
  }
  if (found_d < 0) return false;
  // Backtrack from (n, m) to (0, 0), collecting pairs in reverse.
  std::vector<AlignedPair> rev;
  int64_t x = n, y = m;
  for (int64_t d = found_d; d > 0; --d) {
    const std::vector<int64_t>& prev = trace[static_cast<size_t>(d - 1)];
    auto at = [&](int64_t kk) { return prev[static_cast<size_t>(kk + d - 1)]; };
    int64_t k = x - y;
    int64_t prev_k = (k == -d || (k != d && at(k - 1) < at(k + 1))) ? k + 1 : k - 1;
    int64_t prev_x = at(prev_k), prev_y = prev_x - prev_k;
    while (x > prev_x && y > prev_y) rev.push_back({a0 + --x, b0 + --y});
    if (x == prev_x) {
      rev.push_back({-1, b0 + --y});  // insertion from B
    } else {
      rev.push_back({a0 + --x, -1});  // deletion from A
    }
  }
  while (x > 0 && y > 0) rev.push_back({a0 + --x, b0 + --y});
  out.insert(out.end(), rev.rbegin(), rev.rend());
  edits += found_d;
  return true;
}

}  // namespace

Alignment alignSequences(std::span<const uint64_t> a, std::span<const uint64_t> b,
                         int64_t max_edits) {
  Alignment result;
  const size_t n = a.size(), m = b.size();
  size_t prefix = 0;
  while (prefix < n && prefix < m && a[prefix] == b[prefix]) ++prefix;
  size_t suffix = 0;
  while (suffix < n - prefix && suffix < m - prefix && a[n - 1 - suffix] == b[m - 1 - suffix]) ++suffix;
  result.pairs.reserve(std::max(n, m));
  for (size_t i = 0; i < prefix; ++i) {
    result.pairs.push_back({static_cast<int64_t>(i), static_cast<int64_t>(i)});
  }
  auto mid_a = a.subspan(prefix, n - prefix - suffix);
  auto mid_b = b.subspan(prefix, m - prefix - suffix);
  if (!myers(mid_a, mid_b, static_cast<int64_t>(prefix), static_cast<int64_t>(prefix), max_edits,
             result.pairs, result.edits)) {
    // Too different to search: pair the middle by position, the rest as gaps.
    result.exact = false;
    size_t common = std::min(mid_a.size(), mid_b.size());
    for (size_t i = 0; i < std::max(mid_a.size(), mid_b.size()); ++i) {
      int64_t ia = i < mid_a.size() ? static_cast<int64_t>(prefix + i) : -1;
      int64_t ib = i < mid_b.size() ? static_cast<int64_t>(prefix + i) : -1;
      result.pairs.push_back({ia, ib});
    }
    result.edits = static_cast<int64_t>(std::max(mid_a.size(), mid_b.size()) - common);
  }
  for (size_t i = 0; i < suffix; ++i) {
    result.pairs.push_back({static_cast<int64_t>(n - suffix + i), static_cast<int64_t>(m - suffix + i)});
  }
  return result;
}

}  // namespace detrace::replay
