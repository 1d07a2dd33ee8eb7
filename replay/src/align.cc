#include "detrace/replay/align.h"

#include <algorithm>

namespace detrace::replay {
namespace {

// The path found by a search, from its end back to (0, 0), appended to `out` in order.
void backtrack(const std::vector<std::vector<int64_t>>& trace, int64_t found_d, int64_t x,
               int64_t y, int64_t a0, int64_t b0, std::vector<AlignedPair>& out) {
  std::vector<AlignedPair> rev;
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
}

// Myers' greedy forward search on a[0..n) vs b[0..m) from (0, 0), until a furthest-reaching point
// (x, y), reached by a snake of `snake` matches, satisfies done(x, y, snake). Returns false if that
// takes more than max_d edits; otherwise appends the path there (offset by a0, b0) to out and sets
// end_x, end_y to the point.
template <typename Done>
bool myers(std::span<const uint64_t> a, std::span<const uint64_t> b, int64_t a0, int64_t b0,
           int64_t max_d, Done done, std::vector<AlignedPair>& out, int64_t& edits, int64_t& end_x,
           int64_t& end_y) {
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
      const int64_t x0 = x;
      while (x < n && y < m && a[static_cast<size_t>(x)] == b[static_cast<size_t>(y)]) ++x, ++y;
      at(k) = x;
      if (done(x, y, x - x0)) {
        found_d = d;
        end_x = x;
        end_y = y;
        break;
      }
    }
    trace.emplace_back(v.begin() + (offset - d), v.begin() + (offset + d + 1));
  }
  if (found_d < 0) return false;
  backtrack(trace, found_d, end_x, end_y, a0, b0, out);
  edits += found_d;
  return true;
}

// Gaps for indices [from, to) of A (side_a) or of B.
void gaps(std::vector<AlignedPair>& out, size_t from, size_t to, bool side_a) {
  for (size_t i = from; i < to; ++i) {
    out.push_back(side_a ? AlignedPair{static_cast<int64_t>(i), -1}
                         : AlignedPair{-1, static_cast<int64_t>(i)});
  }
}

}  // namespace

Alignment alignSequences(std::span<const uint64_t> a, std::span<const uint64_t> b,
                         int64_t max_edits) {
  Alignment result;
  const size_t n = a.size(), m = b.size();
  size_t prefix = 0;
  while (prefix < n && prefix < m && a[prefix] == b[prefix]) ++prefix;
  size_t suffix = 0;
  while (suffix < n - prefix && suffix < m - prefix && a[n - 1 - suffix] == b[m - 1 - suffix])
    ++suffix;
  result.pairs.reserve(std::max(n, m));
  for (size_t i = 0; i < prefix; ++i) {
    result.pairs.push_back({static_cast<int64_t>(i), static_cast<int64_t>(i)});
  }
  auto mid_a = a.subspan(prefix, n - prefix - suffix);
  auto mid_b = b.subspan(prefix, m - prefix - suffix);
  const auto n_mid = static_cast<int64_t>(mid_a.size()), m_mid = static_cast<int64_t>(mid_b.size());
  auto at_end = [&](int64_t x, int64_t y, int64_t) { return x >= n_mid && y >= m_mid; };
  int64_t end_x = 0, end_y = 0;
  if (!myers(mid_a, mid_b, static_cast<int64_t>(prefix), static_cast<int64_t>(prefix), max_edits,
             at_end, result.pairs, result.edits, end_x, end_y)) {
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
    result.pairs.push_back(
        {static_cast<int64_t>(n - suffix + i), static_cast<int64_t>(m - suffix + i)});
  }
  return result;
}

WindowAlignment alignWindow(std::span<const uint64_t> a, std::span<const uint64_t> b, bool a_final,
                            bool b_final, int64_t max_edits) {
  WindowAlignment out;
  const size_t n = a.size(), m = b.size();
  if (a_final && b_final) {
    static_cast<Alignment&>(out) = alignSequences(a, b, max_edits);
    out.used_a = static_cast<int64_t>(n);
    out.used_b = static_cast<int64_t>(m);
    return out;
  }
  size_t x = 0;
  for (; x < n && x < m && a[x] == b[x]; ++x) {
    out.pairs.push_back({static_cast<int64_t>(x), static_cast<int64_t>(x)});
  }
  out.used_a = out.used_b = static_cast<int64_t>(x);
  const bool a_ended = x == n && a_final, b_ended = x == m && b_final;
  if (a_ended || b_ended) {  // one run has ended: the rest of the other is extra
    gaps(out.pairs, x, a_ended ? m : n, /*side_a=*/!a_ended);
    out.edits += static_cast<int64_t>((a_ended ? m : n) - x);
    out.used_a = static_cast<int64_t>(n);
    out.used_b = static_cast<int64_t>(m);
    return out;
  }
  if (x == n || x == m) return out;  // in step up to a window's end: read on
  auto rest_a = a.subspan(x), rest_b = b.subspan(x);
  const auto n_rest = static_cast<int64_t>(rest_a.size()),
             m_rest = static_cast<int64_t>(rest_b.size());
  auto in_step_at_window_end = [&](int64_t px, int64_t py, int64_t snake) {
    if (px > n_rest || py > m_rest || py < 0 || snake < kSyncKeys) return false;
    return (px == n_rest && !a_final) || (py == m_rest && !b_final);
  };
  int64_t end_x = 0, end_y = 0;
  const auto x0 = static_cast<int64_t>(x);
  if (myers(rest_a, rest_b, x0, x0, max_edits, in_step_at_window_end, out.pairs, out.edits, end_x,
            end_y)) {
    out.used_a = x0 + end_x;
    out.used_b = x0 + end_y;
  }
  return out;
}

}  // namespace detrace::replay
