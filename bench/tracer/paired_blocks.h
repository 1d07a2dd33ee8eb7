// Paired blocks: a cost of a few hundred nanoseconds per call, measured where whole-loop timings
// drift by up to 2x within seconds (the GPU machine). Two sides run block by block, which goes
// first alternating, and only the per-block paired differences are summarised. Shared by
// cupti_record_cost and lane_cost.
#pragma once

#include <algorithm>
#include <cstdio>
#include <vector>

namespace detrace::bench {

inline double quantile(std::vector<double> xs, double q) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<size_t>(q * static_cast<double>(xs.size())))];
}

// One line: each side's median per call and the paired differences' median and quartiles (ns).
inline void report(const char* part, const char* with, const char* without,
                   const std::vector<double>& on, const std::vector<double>& off) {
  std::vector<double> diff(on.size());
  for (size_t i = 0; i < on.size(); ++i) diff[i] = on[i] - off[i];
  std::printf(
      "%s: %zu block pairs; per call %s %.1f ns, %s %.1f ns (medians); paired difference "
      "%.1f ns (quartiles %.1f / %.1f / %.1f)\n",
      part, on.size(), with, quantile(on, 0.5), without, quantile(off, 0.5), quantile(diff, 0.5),
      quantile(diff, 0.25), quantile(diff, 0.5), quantile(diff, 0.75));
  std::fflush(stdout);
}

inline constexpr int kWarmupPairs = 20;

// Runs `side(true)` and `side(false)` (each returns ns per call of one block) block by block:
// kWarmupPairs pairs untimed first (modules loaded, buffers in use on both sides), then
// `timed_begin()`, then `blocks` timed pairs whose first side alternates.
template <typename Side, typename Begin>
void alternate(int blocks, Side&& side, std::vector<double>& on, std::vector<double>& off,
               Begin&& timed_begin) {
  for (int w = 0; w < kWarmupPairs; ++w) {
    side(true);
    side(false);
  }
  timed_begin();
  for (int b = 0; b < blocks; ++b) {
    if (b % 2 == 0) {
      on.push_back(side(true));
      off.push_back(side(false));
    } else {
      off.push_back(side(false));
      on.push_back(side(true));
    }
  }
}

template <typename Side>
void alternate(int blocks, Side&& side, std::vector<double>& on, std::vector<double>& off) {
  alternate(blocks, side, on, off, [] {});
}

}  // namespace detrace::bench
