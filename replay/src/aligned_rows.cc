#include "detrace/replay/aligned_rows.h"

#include <algorithm>

namespace detrace::replay {

AlignedRows::AlignedRows(const RankDiff& diff)
    : differing_(diff.differing), events_a_(diff.events_a), events_b_(diff.events_b) {
  int64_t na = 0, nb = 0, row = 0;
  for (const PairDiff& d : differing_) {
    int64_t gap = d.a >= 0 ? d.a - na : d.b >= 0 ? d.b - nb : 0;
    gap = std::max<int64_t>(gap, 0);
    na += gap;
    nb += gap;
    row += gap;
    a_at_.push_back(na);
    b_at_.push_back(nb);
    diff_rows_.push_back(row);
    if (d.a >= 0) na = d.a + 1;
    if (d.b >= 0) nb = d.b + 1;
    ++row;
  }
  rows_ = row + std::max<int64_t>({events_a_ - na, events_b_ - nb, 0});
}

AlignedRow AlignedRows::at(int64_t row) const {
  auto it = std::lower_bound(diff_rows_.begin(), diff_rows_.end(), row);
  size_t i = static_cast<size_t>(it - diff_rows_.begin());
  if (it != diff_rows_.end() && *it == row) {
    return {differing_[i].a, differing_[i].b, differing_[i].status};
  }
  int64_t first_row = 0, a0 = 0, b0 = 0;  // where the run of identical rows containing `row` starts
  if (i > 0) {
    const PairDiff& p = differing_[i - 1];
    first_row = diff_rows_[i - 1] + 1;
    a0 = p.a >= 0 ? p.a + 1 : a_at_[i - 1];
    b0 = p.b >= 0 ? p.b + 1 : b_at_[i - 1];
  }
  int64_t a = a0 + row - first_row, b = b0 + row - first_row;
  AlignedRow out{a < events_a_ ? a : -1, b < events_b_ ? b : -1, PairStatus::kIdentical};
  if (out.a < 0 || out.b < 0) out.status = PairStatus::kSchedule;  // only past a ragged end
  return out;
}

int64_t AlignedRows::rowOf(int64_t seq, bool side_a) const {
  const int64_t events = side_a ? events_a_ : events_b_;
  if (seq < 0 || seq >= events) return -1;
  const std::vector<int64_t>& at = side_a ? a_at_ : b_at_;
  auto seqOf = [&](size_t i) { return side_a ? differing_[i].a : differing_[i].b; };
  size_t i = static_cast<size_t>(std::lower_bound(at.begin(), at.end(), seq) - at.begin());
  while (i < at.size() && at[i] == seq && seqOf(i) != seq) ++i;  // pairs absent on this side
  if (i < at.size() && seqOf(i) == seq) return diff_rows_[i];
  if (i < at.size()) return diff_rows_[i] - (at[i] - seq);
  // The identical tail after the last differing pair.
  int64_t first_row = 0, s0 = 0;
  if (!differing_.empty()) {
    size_t last = differing_.size() - 1;
    first_row = diff_rows_[last] + 1;
    s0 = seqOf(last) >= 0 ? seqOf(last) + 1 : at[last];
  }
  return first_row + (seq - s0);
}

int64_t AlignedRows::rowOfA(int64_t seq) const { return rowOf(seq, true); }
int64_t AlignedRows::rowOfB(int64_t seq) const { return rowOf(seq, false); }

}  // namespace detrace::replay
