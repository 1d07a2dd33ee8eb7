// One rank of `detrace diff`: aligns the two runs' events and classifies every aligned pair,
// reading each run a window at a time (diff.h).
//
// Rounds. Each round reads both runs to a lookahead past the last placed pair, aligns the library
// ops (anchors) of the windows with alignWindow(), and places the events between consecutive
// aligned anchors with alignSequences(), exactly as one whole-run pass would. A window that is not
// the end of its run only settles what later events cannot change (align.h); when a round places
// nothing (no anchor aligns within the windows) the events before the next anchors are aligned on
// their own, and if even that needs more, the lookahead doubles, up to kMaxLookaheadGrowth times,
// past which the windows are aligned as if the runs ended there. Placed pairs stream through the
// reorder window (kReorderWindow positions, for moved events) and are classified in the
// alignment's order; each run's events before the oldest unclassified pair are then forgotten.
#include <algorithm>
#include <deque>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>

#include "detrace/replay/align.h"

#include "diff_internal.h"

namespace detrace::replay {
namespace {

// How far a window may read ahead when the runs do not fall back into step, in multiples of the
// usual lookahead (two chunks): the bound on the diff's memory.
constexpr int64_t kMaxLookaheadGrowth = 8;

std::string algoName(const RankOps& r, int64_t id) { return r.name(id).empty() ? "?" : r.name(id); }

// The seqs of the library ops in [from, window end).
std::vector<int64_t> anchorsFrom(const RankOps& r, int64_t from) {
  std::vector<int64_t> out;
  for (int64_t s = std::max(from, r.base); s < r.end(); ++s) {
    if (r.at(s)->anchor) out.push_back(s);
  }
  return out;
}

std::vector<uint64_t> keysAt(const RankOps& r, const std::vector<int64_t>& seqs) {
  std::vector<uint64_t> keys;
  keys.reserve(seqs.size());
  for (int64_t s : seqs) keys.push_back(r.at(s)->key);
  return keys;
}

std::vector<uint64_t> keysIn(const RankOps& r, int64_t from, int64_t to) {
  std::vector<uint64_t> keys;
  for (int64_t s = from; s < to; ++s) keys.push_back(r.at(s)->key);
  return keys;
}

// Loads both runs' windows at once (each reader is its own connection, so two threads can).
Status loadBoth(RankLoader& a, int64_t to_a, RankLoader& b, int64_t to_b, int64_t chunk) {
  Status sb;
  std::thread other([&] { sb = b.loadTo(to_b, chunk); });
  Status sa = a.loadTo(to_a, chunk);
  other.join();
  DETRACE_RETURN_IF_ERROR(sa);
  return sb;
}

// Aligns and classifies one rank. The aligned pairs stream through a window of the last
// kReorderWindow positions before they are classified, so that an event missing from one side can
// still meet the same event missing from the other (a moved event, see diff.h) and be classified
// as one pair; they leave the window, and are classified, in the alignment's order.
class RankDiffer {
 public:
  RankDiffer(RankLoader& a, RankLoader& b, db::TraceReader& ra, db::TraceReader& rb, bool batch,
             const DiffOptions& options, SelectionTable& table, RankScratch& scratch)
      : a_(a),
        b_(b),
        deep_(ra, rb),
        batch_(batch),
        keep_rows_(options.keep_differing),
        chunk_(std::max<int64_t>(options.chunk_events, 1)),
        table_(table),
        scratch_(scratch) {
    // Enough to see past the kernels a library op launched (describeFirst) and to align.
    base_lookahead_ = std::max(2 * chunk_, 2 * kChildKernelScan);
    lookahead_ = base_lookahead_;
    out_.rank = a.ops().rank;
  }

  Result<RankDiff> run() {
    for (;;) {
      DETRACE_RETURN_IF_ERROR(loadBoth(a_, pa_ + lookahead_, b_, pb_ + lookahead_, chunk_));
      out_.peak_window = std::max({out_.peak_window, a().end() - a().base, b().end() - b().base});
      describePending();
      dropSettled();
      bool finished = alignRound();
      DETRACE_RETURN_IF_ERROR(error_);
      if (finished) break;
    }
    while (!window_.empty()) settle();
    DETRACE_RETURN_IF_ERROR(error_);
    describePending();
    return finish();
  }

 private:
  // A pair as the alignment gave it, waiting in the window.
  struct Slot {
    int64_t a = -1, b = -1;
    int64_t collectives_before = 0;
    int64_t partner_pos = -1;  // a moved event: the position of its other half
    int64_t partner = -1;      // ... and that half's seq (on the other side)
    uint64_t move_key = 0;     // on one side only: what its partner must match (movingKey)
    bool pending = false;      // on one side only, and waiting for a partner in pending_
    bool settled = false;      // the later half of a moved event, classified with the earlier
    PairStatus status = PairStatus::kIdentical;
  };

  const RankOps& a() const { return a_.ops(); }
  const RankOps& b() const { return b_.ops(); }

  // One round over the windows (see the top of this file); true when every event is placed.
  bool alignRound() {
    const bool final_a = a_.done() || force_, final_b = b_.done() || force_;
    std::vector<int64_t> anchors_a = anchorsFrom(a(), pa_), anchors_b = anchorsFrom(b(), pb_);
    WindowAlignment top =
        alignWindow(keysAt(a(), anchors_a), keysAt(b(), anchors_b), final_a, final_b);
    out_.exact_alignment &= top.exact;
    bool placed = false;
    for (const AlignedPair& p : top.pairs) {
      if (p.a < 0 || p.b < 0) continue;  // unmatched anchors fall inside the next segment
      ++out_.anchors_matched;
      int64_t ia = anchors_a[static_cast<size_t>(p.a)], ib = anchors_b[static_cast<size_t>(p.b)];
      segment(ia, ib);
      place(ia, ib);
      pa_ = ia + 1;
      pb_ = ib + 1;
      placed = true;
    }
    if (final_a && final_b) {  // every anchor of the windows is aligned: the rest is one segment
      segment(a().end(), b().end());
      if (a_.done() && b_.done()) return true;
      placed = true;
    }
    if (!placed) placed = openSegment(top, anchors_a, anchors_b);
    force_ = false;
    if (placed) {
      lookahead_ = base_lookahead_;
    } else if (lookahead_ < kMaxLookaheadGrowth * base_lookahead_) {
      lookahead_ *= 2;
    } else {
      force_ = true;  // the windows at their largest: align them as if the runs ended there
      ++out_.forced_windows;
    }
    return false;
  }

  // No anchor aligned in this round's windows: the events before each run's first anchor that
  // the round left open belong to the segment before the next aligned anchors, whatever those
  // are; aligns them as far as they show. Returns whether anything was placed.
  bool openSegment(const WindowAlignment& top, const std::vector<int64_t>& anchors_a,
                   const std::vector<int64_t>& anchors_b) {
    const auto open_a = static_cast<size_t>(top.used_a), open_b = static_cast<size_t>(top.used_b);
    const int64_t end_a = open_a < anchors_a.size() ? anchors_a[open_a] : a().end();
    const int64_t end_b = open_b < anchors_b.size() ? anchors_b[open_b] : b().end();
    const bool final_a = a_.done() && open_a == anchors_a.size();
    const bool final_b = b_.done() && open_b == anchors_b.size();
    WindowAlignment al =
        alignWindow(keysIn(a(), pa_, end_a), keysIn(b(), pb_, end_b), final_a, final_b);
    out_.exact_alignment &= al.exact;
    for (const AlignedPair& p : al.pairs) {
      place(p.a < 0 ? -1 : pa_ + p.a, p.b < 0 ? -1 : pb_ + p.b);
    }
    pa_ += al.used_a;
    pb_ += al.used_b;
    return !al.pairs.empty();
  }

  // Aligns the events from the last placed pair up to (not including) A's `to_a` and B's `to_b`
  // by key, and places the pairs.
  void segment(int64_t to_a, int64_t to_b) {
    if (pa_ >= to_a && pb_ >= to_b) return;
    Alignment al = alignSequences(keysIn(a(), pa_, to_a), keysIn(b(), pb_, to_b));
    out_.exact_alignment &= al.exact;
    for (const AlignedPair& p : al.pairs) {
      place(p.a < 0 ? -1 : pa_ + p.a, p.b < 0 ? -1 : pb_ + p.b);
    }
    pa_ = std::max(pa_, to_a);
    pb_ = std::max(pb_, to_b);
  }

  // Forgets the events before the oldest unclassified pair, a chunk or more at a time (so that the
  // window's front moves rarely). The first divergence is described before this, at the start of
  // the round after it was found.
  static void dropBefore(RankLoader& side, int64_t keep, int64_t chunk) {
    if (keep - side.ops().base >= chunk) side.dropBefore(keep);
  }
  void dropSettled() {
    dropBefore(a_, settled_a_, chunk_);
    dropBefore(b_, settled_b_, chunk_);
  }

  void describePending() {
    if (!pending_describe_) return;
    pending_describe_ = false;
    describeFirst(a(), b(), batch_ ? nullptr : &deep_.current(), out_);
  }

  Result<RankDiff> finish() {
    out_.events_a = a().events;
    out_.events_b = b().events;
    out_.anchors_a = a().anchor_count;
    out_.anchors_b = b().anchor_count;
    if (!batch_) out_.deep = deep_.finish(a(), b());
    for (auto& [key, change] : choices_) out_.collective_choices.push_back(std::move(change));
    return std::move(out_);
  }

  Slot& slotAt(int64_t pos) { return window_[static_cast<size_t>(pos - head_)]; }

  // The next pair of the alignment enters the window; the oldest leaves it when it is full.
  void place(int64_t ia, int64_t ib) {
    Slot s{ia, ib, collectives_};
    const OpRecord* oa = a().at(ia);
    const OpRecord* ob = b().at(ib);
    if (oa && oa->kind() == db::EventKind::kCollective) ++collectives_;
    const int64_t pos = head_ + static_cast<int64_t>(window_.size());
    if (oa && ob && oa->anchor && ob->anchor && oa->key == ob->key) {
      anchor_pairs_.push_back({ia, ib, pos});
    }
    if ((ia < 0) != (ib < 0)) pairMoved(s, pos);
    window_.push_back(s);
    if (static_cast<int64_t>(window_.size()) > kReorderWindow) settle();
  }

  // What an event on one side only must share with its partner to be the same event moved: its
  // alignment key and, for a kernel a library op launched, that op (as run A's seq: the partner's
  // op must be aligned with it). Nothing for markers (positions, not work) and for a child of a
  // library op that has no aligned partner.
  std::optional<uint64_t> movingKey(const Slot& s) const {
    const bool in_a = s.a >= 0;
    const OpRecord& op = in_a ? *a().at(s.a) : *b().at(s.b);
    if (op.kind() == db::EventKind::kMarker) return std::nullopt;
    int64_t parent = op.parent;
    if (parent >= 0 && !in_a) parent = parentInA(parent);
    if (op.parent >= 0 && parent < 0) return std::nullopt;
    uint64_t x = op.key ^ (static_cast<uint64_t>(parent + 2) * 0x9E3779B97F4A7C15ULL);
    return x ^ (x >> 31);
  }

  // Run A's library op aligned with run B's `seq_b` (in the window), or -1. anchor_pairs_ is in
  // the order of both runs (the alignment is monotone).
  int64_t parentInA(int64_t seq_b) const {
    auto it = std::lower_bound(anchor_pairs_.begin(), anchor_pairs_.end(), seq_b,
                               [](const AnchorPair& p, int64_t b) { return p.b < b; });
    return it != anchor_pairs_.end() && it->b == seq_b ? it->a : -1;
  }

  // An event on one side only: the oldest pending event of the other side with its moving key,
  // within the window, is the same event moved. Pending events of one key are all on one side
  // (an event of the other side would have been paired with them), oldest first.
  void pairMoved(Slot& s, int64_t pos) {
    std::optional<uint64_t> key = movingKey(s);
    if (!key) return;
    auto it = pending_.find(*key);
    if (it != pending_.end() && (slotAt(it->second.front()).a >= 0) != (s.a >= 0)) {
      Slot& earlier = slotAt(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) pending_.erase(it);
      earlier.pending = false;
      earlier.partner_pos = pos;
      earlier.partner = s.a >= 0 ? s.a : s.b;
      s.partner = earlier.a >= 0 ? earlier.a : earlier.b;
      return;
    }
    s.move_key = *key;
    s.pending = true;
    pending_[*key].push_back(pos);
  }

  // Classifies the oldest pair of the window and records it.
  void settle() {
    Slot s = window_.front();
    window_.pop_front();
    ++head_;
    while (!anchor_pairs_.empty() && anchor_pairs_.front().pos < head_) anchor_pairs_.pop_front();
    if (s.settled) {  // the later half of a moved event: classified and counted with the earlier
      if (s.status != PairStatus::kIdentical) keepRow(rowOf(s));
    } else if (s.partner >= 0) {
      settleMoved(s);
    } else {
      settlePair(s);
    }
    left(s);
  }

  void settlePair(Slot& s) {
    if (s.pending) {  // never paired: it leaves the pending events of its key (their oldest)
      auto it = pending_.find(s.move_key);
      it->second.pop_front();
      if (it->second.empty()) pending_.erase(it);
    }
    const OpRecord* oa = a().at(s.a);
    const OpRecord* ob = b().at(s.b);
    s.status = statusOf(oa, ob);
    record(rowOf(s), oa, ob);
  }

  // The earlier half of a moved event: the pair is classified now, at the earlier place.
  void settleMoved(Slot& s) {
    Slot& later = slotAt(s.partner_pos);
    const int64_t ia = s.a >= 0 ? s.a : later.a, ib = s.b >= 0 ? s.b : later.b;
    const OpRecord* oa = a().at(ia);
    const OpRecord* ob = b().at(ib);
    PairStatus status = statusOf(oa, ob);
    if (status == PairStatus::kIdentical) status = PairStatus::kReordered;
    s.status = later.status = status;
    later.settled = true;
    ++out_.counts[status];
    if (status != PairStatus::kReordered) ++out_.differing_events;
    keepRow(rowOf(s));
    noteSelection(status, oa, ob);
    if (status == PairStatus::kReordered) return;
    int64_t before = s.a >= 0 ? s.collectives_before : later.collectives_before;
    considerFirst(PairDiff{ia, ib, status, before, ib}, oa, ob);
  }

  // A slot has left the window: its events are classified; deep launches of A are compared.
  void left(const Slot& s) {
    if (s.a >= 0) settled_a_ = s.a + 1;
    if (s.b >= 0) settled_b_ = s.b + 1;
    if (s.a >= 0 && !batch_ && error_.isOk()) error_ = deep_.visit(a(), b(), s.a, s.b);
  }

  PairDiff rowOf(const Slot& s) const {
    return PairDiff{s.a, s.b, s.status, s.collectives_before, s.partner};
  }

  // A differing row: kept if asked, and noted for propagation across ranks if it is one of A's
  // collectives.
  void keepRow(const PairDiff& d) {
    const OpRecord* oa = a().at(d.a);
    const db::Collective* c = oa != nullptr ? a().collective(*oa) : nullptr;
    if (c != nullptr) {
      const CollectiveId id = collectiveIdOf(*c);
      if (d.status == PairStatus::kPropagated) scratch_.propagated.add(id);
      if (d.status == PairStatus::kNondeterministic) {
        scratch_.nondeterministic.add(id);
        if (keep_rows_) scratch_.nondeterministic_rows.emplace_back(out_.differing.size(), id);
      }
    }
    if (keep_rows_) out_.differing.push_back(d);
  }

  void record(const PairDiff& d, const OpRecord* oa, const OpRecord* ob) {
    ++out_.counts[d.status];
    if (d.status == PairStatus::kIdentical) return;
    ++out_.differing_events;
    keepRow(d);
    noteSelection(d.status, oa, ob);
    considerFirst(d, oa, ob);
  }

  // A row of the kernel-selection table (a moved event counts once).
  void noteSelection(PairStatus status, const OpRecord* oa, const OpRecord* ob) {
    if (status != PairStatus::kKernelSelection || oa == nullptr || ob == nullptr) return;
    ++table_[{static_cast<int>(oa->kind()), choiceText(a(), *oa), choiceText(b(), *ob)}];
  }

  void considerFirst(const PairDiff& d, const OpRecord* oa, const OpRecord* ob) {
    bool marker = (oa && oa->kind() == db::EventKind::kMarker) ||
                  (ob && ob->kind() == db::EventKind::kMarker);
    bool anchor = (oa && oa->anchor) || (ob && ob->anchor);
    if (out_.first || marker || (batch_ && !anchor)) return;
    out_.first = d;
    pending_describe_ = true;
    scratch_.first_is_collective = oa != nullptr && oa->kind() == db::EventKind::kCollective;
    if (const db::Collective* c = oa != nullptr ? a().collective(*oa) : nullptr) {
      scratch_.first_id = collectiveIdOf(*c);
    }
  }

  // How a pair is classified (an event on one side only: a schedule difference).
  PairStatus statusOf(const OpRecord* oa, const OpRecord* ob) {
    if (!oa || !ob) return PairStatus::kSchedule;
    // An inexact alignment paired unrelated ops by position: that is a schedule difference.
    if (oa->key != ob->key) return PairStatus::kSchedule;
    if (oa->kind() == db::EventKind::kMarker || ob->kind() == db::EventKind::kMarker) {
      return PairStatus::kIdentical;  // "step 3" and "step 4" are one family: positions, not ops
    }
    PairStatus status;
    if (batch_ && oa->anchor) {
      status = classifyBatch(a(), *oa, b(), *ob);
    } else if (batch_) {
      // Kernels carry no fingerprints: in batch mode their selection may differ legitimately.
      status = a().choice(*oa) != b().choice(*ob) ? PairStatus::kKernelSelection
                                                  : PairStatus::kIdentical;
    } else {
      status = classify(a(), *oa, b(), *ob, out_.first.has_value());
    }
    noteCollectiveChoice(*oa, *ob);
    return status;
  }

  // Two collectives of the same kind (and, run to run, size) that NCCL ran differently: a row of
  // the NCCL choice table, with what became of their outputs.
  void noteCollectiveChoice(const OpRecord& oa, const OpRecord& ob) {
    const db::Collective* ca = a().collective(oa);
    const db::Collective* cb = b().collective(ob);
    if (ca == nullptr || cb == nullptr || a().choice(oa) == b().choice(ob)) return;
    CollectiveChoiceChange c;
    c.op = ca->op;
    c.dtype = ca->dtype;
    c.count_a = ca->count;
    c.count_b = cb->count;
    c.algo_a = algoName(a(), ca->algo);
    c.proto_a = algoName(a(), ca->proto);
    c.channels_a = ca->channels;
    c.algo_b = algoName(b(), cb->algo);
    c.proto_b = algoName(b(), cb->proto);
    c.channels_b = cb->channels;
    c.calls = 1;
    c.ranks = {out_.rank};
    PairStatus outcome = outputOutcome(oa, ob);
    int64_t& calls = outcome == PairStatus::kIdentical    ? c.unchanged
                     : outcome == PairStatus::kPropagated ? c.inputs_differed
                     : outcome == PairStatus::kSchedule   ? c.unknown
                                                          : c.changed;
    ++calls;
    auto [it, fresh] = choices_.try_emplace(choiceKey(c), c);
    if (!fresh) mergeChoice(it->second, c);
  }

  // The outputs of a pair, whatever ran it: identical, propagated, batch-variant or
  // nondeterministic; kSchedule stands for "not known" (no fingerprints or row digests).
  PairStatus outputOutcome(const OpRecord& oa, const OpRecord& ob) const {
    if (batch_) return rowsStatus(a(), oa, b(), ob).value_or(PairStatus::kSchedule);
    if (!fingerprintsOf(a(), oa).has_outputs || !fingerprintsOf(b(), ob).has_outputs) {
      return PairStatus::kSchedule;
    }
    return contentStatus(a(), oa, b(), ob, out_.first.has_value());
  }

  RankLoader& a_;
  RankLoader& b_;
  DeepComparer deep_;
  const bool batch_, keep_rows_;
  const int64_t chunk_;
  SelectionTable& table_;
  RankScratch& scratch_;
  int64_t base_lookahead_ = 0, lookahead_ = 0;
  bool force_ = false;
  int64_t pa_ = 0, pb_ = 0;                // the next event of each run to place
  int64_t settled_a_ = 0, settled_b_ = 0;  // the next event of each run to classify
  bool pending_describe_ = false;          // out_.first is still to be described
  Status error_;
  RankDiff out_;
  int64_t collectives_ = 0;
  std::deque<Slot> window_;  // the pairs at positions [head_, head_ + size) of the alignment
  int64_t head_ = 0;
  // Events on one side only, still in the window and unpaired: their positions, by key.
  std::unordered_map<uint64_t, std::deque<int64_t>> pending_;
  // The aligned library ops in the window: the parents of kernels that may still be paired.
  struct AnchorPair {
    int64_t a, b, pos;
  };
  std::deque<AnchorPair> anchor_pairs_;
  std::map<ChoiceKey, CollectiveChoiceChange> choices_;
};

}  // namespace

Result<RankDiff> diffRankWindows(RankLoader& a, RankLoader& b, db::TraceReader& ra,
                                 db::TraceReader& rb, bool batch, const DiffOptions& options,
                                 SelectionTable& table, RankScratch& scratch) {
  return RankDiffer(a, b, ra, rb, batch, options, table, scratch).run();
}

}  // namespace detrace::replay
