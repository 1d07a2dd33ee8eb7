// Sequence alignment for comparing runs: which element of run A corresponds to which of run B.
//
// alignSequences() computes a minimal edit script between two key sequences (Myers' O((N+M)D)
// algorithm after stripping the common prefix and suffix, so two nearly identical 10M-event
// streams cost little more than a linear scan). When the sequences differ in more than `max_edits`
// places it stops searching and pairs the remaining middle position by position, so the cost stays
// bounded on unrelated runs; `exact` in the result says which happened.
//
// alignWindow() aligns the start of two sequences of which only windows are known (runs read a
// chunk at a time, diff.h): with both windows final it is alignSequences(); otherwise it aligns
// only what is settled without the rest: the common prefix and, from the first difference, Myers'
// edit path to the first point where the two windows agree on kSyncKeys keys in a row up to the end
// of one of them. That is the path alignSequences() takes whenever the runs fall back into step
// after each difference within the window.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace detrace::replay {

struct AlignedPair {
  int64_t a = -1;  // index into sequence A, or -1 if B's element has no partner
  int64_t b = -1;  // index into sequence B, or -1 if A's element has no partner
  bool operator==(const AlignedPair&) const = default;
};

struct Alignment {
  std::vector<AlignedPair> pairs;  // in order; every index of A and of B appears exactly once
  bool exact = true;               // false if the edit budget ran out (middle paired by position)
  int64_t edits = 0;               // insertions + deletions in the script
};

Alignment alignSequences(std::span<const uint64_t> a, std::span<const uint64_t> b,
                         int64_t max_edits = 2048);

// How many equal keys in a row, up to the end of a window, let alignWindow() close an edit path
// there: evidence that the runs are back in step, not an accident of where the window ends.
inline constexpr int64_t kSyncKeys = 8;

// The aligned start of two windows: pairs cover indices [0, used_a) of A and [0, used_b) of B.
struct WindowAlignment : Alignment {
  int64_t used_a = 0, used_b = 0;
};

// `a_final` says that `a` runs to the end of its sequence (likewise `b`). With both final: the
// whole of alignSequences(). Otherwise pairs may be empty: the windows are too short to show where
// the runs fall back into step; read more and call again (or align them as final).
WindowAlignment alignWindow(std::span<const uint64_t> a, std::span<const uint64_t> b, bool a_final,
                            bool b_final, int64_t max_edits = 2048);

}  // namespace detrace::replay
