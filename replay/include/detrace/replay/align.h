// Sequence alignment for comparing runs: which element of run A corresponds to which of run B.
//
// alignSequences() computes a minimal edit script between two key sequences (Myers' O((N+M)D)
// algorithm after stripping the common prefix and suffix, so two nearly identical 10M-event
// streams cost little more than a linear scan). When the sequences differ in more than `max_edits`
// places it stops searching and pairs the remaining middle position by position, so the cost stays
// bounded on unrelated runs; `exact` in the result says which happened.
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

}  // namespace detrace::replay
