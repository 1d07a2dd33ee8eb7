// Every aligned pair of one rank, as rows a viewer can page through, rebuilt from a RankDiff.
//
// A diff keeps only the differing pairs (DiffOptions::keep_differing, the default, keeps them all);
// the identical pairs between two of them are implied: an alignment is monotone in both runs and
// covers every event exactly once, so between two consecutive differing pairs the remaining events
// of A and of B pair up one to one, in order. AlignedRows indexes the differing pairs by row so
// that row -> (seq in A, seq in B, status) and seq -> row are O(log d) with d differing pairs: a
// 10M-event rank with few differences costs a few bytes, not 10M rows.
#pragma once

#include <cstdint>
#include <vector>

#include "detrace/replay/diff.h"

namespace detrace::replay {

struct AlignedRow {
  int64_t a = -1;  // seq in run A, -1 if absent
  int64_t b = -1;  // seq in run B, -1 if absent
  PairStatus status = PairStatus::kIdentical;
  bool operator==(const AlignedRow&) const = default;
};

class AlignedRows {
 public:
  AlignedRows() = default;
  explicit AlignedRows(const RankDiff& diff);

  int64_t size() const { return rows_; }
  // The pair in row `row` (0 <= row < size()).
  AlignedRow at(int64_t row) const;
  // The row holding event `seq` of run A (resp. B), or -1 if there is no such event.
  int64_t rowOfA(int64_t seq) const;
  int64_t rowOfB(int64_t seq) const;
  // The row of each differing pair, ascending.
  const std::vector<int64_t>& differingRows() const { return diff_rows_; }

 private:
  int64_t rowOf(int64_t seq, bool side_a) const;

  std::vector<PairDiff> differing_;
  std::vector<int64_t> diff_rows_;  // row of differing_[i]
  std::vector<int64_t> a_at_,
      b_at_;  // next A / B seq not yet consumed when differing_[i] is reached
  int64_t events_a_ = 0, events_b_ = 0;
  int64_t rows_ = 0;
};

}  // namespace detrace::replay
