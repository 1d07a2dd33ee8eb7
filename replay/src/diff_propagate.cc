// Divergence carried across ranks by collectives: a collective whose inputs matched on one rank
// but that another rank saw with diverged inputs mixed that divergence in. The ranks' differing
// collectives are kept as runs of sequence numbers (CollectiveRuns), so this costs a few entries
// per communicator however long the runs are.
#include <algorithm>

#include "diff_internal.h"

namespace detrace::replay {

CollectiveId collectiveIdOf(const db::Collective& c) {
  const bool send = c.op == db::CollOp::kSend;
  if (!send && c.op != db::CollOp::kRecv) return {c.comm_id, c.comm_seq};
  const int64_t from = send ? c.comm_rank : c.peer, to = send ? c.peer : c.comm_rank;
  // A 63-bit mix of (communicator, sender, receiver), apart from any communicator's own id (a
  // 63-bit hash itself: equal to one by chance only).
  uint64_t h = static_cast<uint64_t>(c.comm_id) ^ 0x7032702d6c616e65ull;  // "p2p-lane"
  for (const int64_t v : {from, to}) {
    h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return {static_cast<int64_t>(h & 0x7fffffffffffffffull), c.comm_seq};
}

void CollectiveRuns::add(const CollectiveId& id) {
  auto it = last_.find(id.first);
  if (it != last_.end() && runs_[it->second].last + 1 == id.second) {
    ++runs_[it->second].last;
    return;
  }
  last_[id.first] = runs_.size();
  runs_.push_back({id.first, id.second, id.second});
}

namespace {

// The union of runs: per communicator, disjoint sequence-number intervals in order.
class CollectiveSet {
 public:
  void add(const CollectiveRuns& runs) {
    for (const CollectiveRuns::Run& r : runs.runs()) by_comm_[r.comm].push_back({r.first, r.last});
  }

  // Sorts and merges the intervals; call once, after the last add().
  void seal() {
    for (auto& [comm, spans] : by_comm_) {
      std::sort(spans.begin(), spans.end());
      std::vector<Span> merged;
      for (const Span& s : spans) {
        if (!merged.empty() && s.first <= merged.back().last + 1) {
          merged.back().last = std::max(merged.back().last, s.last);
        } else {
          merged.push_back(s);
        }
      }
      spans = std::move(merged);
    }
  }

  // How many of the sequence numbers first..last of `comm` are in the set.
  int64_t overlap(int64_t comm, int64_t first, int64_t last) const {
    auto it = by_comm_.find(comm);
    if (it == by_comm_.end()) return 0;
    const std::vector<Span>& spans = it->second;
    auto s = std::lower_bound(spans.begin(), spans.end(), first,
                              [](const Span& x, int64_t v) { return x.last < v; });
    int64_t n = 0;
    for (; s != spans.end() && s->first <= last; ++s) {
      n += std::min(last, s->last) - std::max(first, s->first) + 1;
    }
    return n;
  }

  bool contains(const CollectiveId& id) const {
    return overlap(id.first, id.second, id.second) > 0;
  }

 private:
  struct Span {
    int64_t first, last;
    bool operator<(const Span& o) const { return first < o.first; }
  };
  std::map<int64_t, std::vector<Span>> by_comm_;
};

// Gives the row in B of a moved event the status of its row in A, `in_a` (both halves are rows).
void syncMovedHalfInB(std::vector<PairDiff>& differing, const PairDiff& in_a) {
  for (PairDiff& d : differing) {
    if (d.a < 0 && d.b == in_a.partner) d.status = in_a.status;
  }
}

// Rank `rd`'s nondeterministic collectives that `fed` holds become propagated: its counts, the
// rows it kept, and its first divergence.
void propagateInto(RankDiff& rd, const RankScratch& s, const CollectiveSet& fed) {
  int64_t moved = 0;
  for (const CollectiveRuns::Run& r : s.nondeterministic.runs())
    moved += fed.overlap(r.comm, r.first, r.last);
  if (moved > 0) {
    rd.counts[PairStatus::kNondeterministic] -= moved;
    rd.counts[PairStatus::kPropagated] += moved;
  }
  for (const auto& [i, id] : s.nondeterministic_rows) {
    PairDiff& d = rd.differing[i];
    if (!fed.contains(id)) continue;
    d.status = PairStatus::kPropagated;
    if (d.moved()) syncMovedHalfInB(rd.differing, d);
  }
  // A propagated collective needs no ops to explain.
  if (rd.first && s.first_id && rd.first->status == PairStatus::kNondeterministic &&
      fed.contains(*s.first_id)) {
    rd.first->status = PairStatus::kPropagated;
    rd.why = propagatedText();
  }
}

}  // namespace

void propagateAcrossRanks(std::vector<RankDiff>& ranks, const std::vector<RankScratch>& scratch) {
  CollectiveSet fed;
  for (const RankScratch& s : scratch) fed.add(s.propagated);
  fed.seal();
  for (size_t r = 0; r < ranks.size(); ++r) propagateInto(ranks[r], scratch[r], fed);
}

}  // namespace detrace::replay
