#include "detrace/replay/diff.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "detrace/replay/align.h"

namespace detrace::replay {
namespace {

const OpRecord* opAt(const RankOps& ops, int64_t seq) { return ops.at(seq); }

std::string propagatedText() { return "propagated: its inputs already differed"; }

// An op's fingerprints, or none.
const OpExtra kNoFingerprints;
const OpExtra& fingerprintsOf(const RankOps& r, const OpRecord& op) {
  const OpExtra* x = r.extra(op);
  return x != nullptr ? *x : kNoFingerprints;
}

// What the fingerprints say of a pair, whatever ran it.
PairStatus contentStatus(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                         const OpRecord& ob, bool diverged_before) {
  const OpExtra& a = fingerprintsOf(ra, oa);
  const OpExtra& b = fingerprintsOf(rb, ob);
  bool inputs_known = a.has_inputs && b.has_inputs;
  bool outputs_known = a.has_outputs && b.has_outputs;
  bool outputs_differ = outputs_known && a.outputs != b.outputs;
  if (inputs_known && a.inputs != b.inputs) {
    return outputs_known && !outputs_differ ? PairStatus::kIdentical : PairStatus::kPropagated;
  }
  if (!outputs_differ) return PairStatus::kIdentical;
  if (inputs_known) return PairStatus::kNondeterministic;
  // Outputs differ and the inputs were not fingerprinted: blame the op only if nothing diverged
  // before it on this rank.
  return diverged_before ? PairStatus::kPropagated : PairStatus::kNondeterministic;
}

PairStatus classify(const RankOps& ra, const OpRecord& oa, const RankOps& rb, const OpRecord& ob,
                    bool diverged_before) {
  if (ra.choice(oa) != rb.choice(ob)) return PairStatus::kKernelSelection;
  return contentStatus(ra, oa, rb, ob, diverged_before);
}

// Every row fingerprint of the operand with fewer rows appears among the other's rows.
bool rowsContained(std::span<const uint64_t> x, std::span<const uint64_t> y) {
  std::span<const uint64_t> small = x.size() <= y.size() ? x : y;
  std::span<const uint64_t> large = x.size() <= y.size() ? y : x;
  std::unordered_set<uint64_t> rows(large.begin(), large.end());
  for (uint64_t d : small) {
    if (!rows.count(d)) return false;
  }
  return true;
}

// Batch mode: compare the request's rows of operands in the same slot on both sides; nothing if
// either side lacks row digests of its inputs or outputs.
std::optional<PairStatus> rowsStatus(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                                     const OpRecord& ob) {
  const OpExtra& a = fingerprintsOf(ra, oa);
  const OpExtra& b = fingerprintsOf(rb, ob);
  bool have_in = false, have_out = false, in_match = true, out_match = true;
  for (int32_t i = a.rows_begin; i < a.rows_end; ++i) {
    const RowOperand& x = ra.row_operands[static_cast<size_t>(i)];
    if (x.end == x.begin) continue;
    for (int32_t j = b.rows_begin; j < b.rows_end; ++j) {
      const RowOperand& y = rb.row_operands[static_cast<size_t>(j)];
      if (y.slot != x.slot || y.end == y.begin) continue;
      bool match = rowsContained(ra.rows(x), rb.rows(y));
      if (x.role != db::OperandRole::kOutput) {
        have_in = true;
        in_match &= match;
      }
      if (x.role != db::OperandRole::kInput) {
        have_out = true;
        out_match &= match;
      }
    }
  }
  if (!have_in || !have_out) return std::nullopt;
  if (!in_match) return PairStatus::kPropagated;
  return out_match ? PairStatus::kIdentical : PairStatus::kBatchVariant;
}

PairStatus classifyBatch(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                         const OpRecord& ob) {
  if (std::optional<PairStatus> rows = rowsStatus(ra, oa, rb, ob)) return *rows;
  return ra.choice(oa) != rb.choice(ob) ? PairStatus::kKernelSelection : PairStatus::kIdentical;
}

std::string algoName(const RankOps& r, int64_t id) { return r.name(id).empty() ? "?" : r.name(id); }

// The identity of a row of the NCCL choice table, as a sortable key.
using ChoiceKey = std::tuple<int, int, int64_t, int64_t, std::string, std::string, int32_t,
                             std::string, std::string, int32_t>;
ChoiceKey choiceKey(const CollectiveChoiceChange& c) {
  return {static_cast<int>(c.op), static_cast<int>(c.dtype), c.count_a, c.count_b, c.algo_a,
          c.proto_a, c.channels_a, c.algo_b, c.proto_b, c.channels_b};
}

// Adds `from`'s calls to `into` (the same row of the table).
void mergeChoice(CollectiveChoiceChange& into, const CollectiveChoiceChange& from) {
  into.calls += from.calls;
  into.unchanged += from.unchanged;
  into.changed += from.changed;
  into.inputs_differed += from.inputs_differed;
  into.unknown += from.unknown;
  for (int32_t r : from.ranks) {
    auto at = std::lower_bound(into.ranks.begin(), into.ranks.end(), r);
    if (at == into.ranks.end() || *at != r) into.ranks.insert(at, r);
  }
}

// Aligns and classifies one rank. The aligned pairs stream through a window of the last
// kReorderWindow positions before they are classified, so that an event missing from one side can
// still meet the same event missing from the other (a moved event, see diff.h) and be classified
// as one pair; they leave the window, and are classified, in the alignment's order.
class RankDiffer {
 public:
  RankDiffer(const RankOps& a, const RankOps& b, bool batch) : a_(a), b_(b), batch_(batch) {
    out_.rank = a.rank;
  }

  RankDiff run() {
    out_.events_a = static_cast<int64_t>(a_.ops.size());
    out_.events_b = static_cast<int64_t>(b_.ops.size());
    std::vector<size_t> anchors_a = anchors(a_), anchors_b = anchors(b_);
    std::vector<uint64_t> keys_a = keysAt(a_, anchors_a), keys_b = keysAt(b_, anchors_b);
    Alignment top = alignSequences(keys_a, keys_b);
    out_.exact_alignment = top.exact;
    out_.anchors_a = static_cast<int64_t>(anchors_a.size());
    out_.anchors_b = static_cast<int64_t>(anchors_b.size());
    size_t from_a = 0, from_b = 0;
    for (const AlignedPair& p : top.pairs) {
      if (p.a < 0 || p.b < 0) continue;  // unmatched anchors fall inside the next segment
      ++out_.anchors_matched;
      size_t ia = anchors_a[static_cast<size_t>(p.a)], ib = anchors_b[static_cast<size_t>(p.b)];
      segment(from_a, ia, from_b, ib);
      place(static_cast<int64_t>(ia), static_cast<int64_t>(ib));
      from_a = ia + 1;
      from_b = ib + 1;
    }
    segment(from_a, a_.ops.size(), from_b, b_.ops.size());
    while (!window_.empty()) settle();
    for (auto& [key, change] : choices_) out_.collective_choices.push_back(std::move(change));
    return std::move(out_);
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

  static std::vector<size_t> anchors(const RankOps& r) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < r.ops.size(); ++i) {
      if (r.ops[i].anchor) idx.push_back(i);
    }
    return idx;
  }
  static std::vector<uint64_t> keysAt(const RankOps& r, const std::vector<size_t>& idx) {
    std::vector<uint64_t> keys;
    keys.reserve(idx.size());
    for (size_t i : idx) keys.push_back(r.ops[i].key);
    return keys;
  }

  // Aligns ops [a0, a1) with [b0, b1) by key and places the pairs.
  void segment(size_t a0, size_t a1, size_t b0, size_t b1) {
    if (a0 >= a1 && b0 >= b1) return;
    std::vector<uint64_t> ka, kb;
    for (size_t i = a0; i < a1; ++i) ka.push_back(a_.ops[i].key);
    for (size_t i = b0; i < b1; ++i) kb.push_back(b_.ops[i].key);
    Alignment al = alignSequences(ka, kb);
    out_.exact_alignment &= al.exact;
    for (const AlignedPair& p : al.pairs) {
      place(p.a < 0 ? -1 : static_cast<int64_t>(a0) + p.a,
            p.b < 0 ? -1 : static_cast<int64_t>(b0) + p.b);
    }
  }

  Slot& slotAt(int64_t pos) { return window_[static_cast<size_t>(pos - head_)]; }

  // The next pair of the alignment enters the window; the oldest leaves it when it is full.
  void place(int64_t ia, int64_t ib) {
    Slot s{ia, ib, collectives_};
    const OpRecord* oa = opAt(a_, ia);
    const OpRecord* ob = opAt(b_, ib);
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
    const OpRecord& op = in_a ? a_.ops[static_cast<size_t>(s.a)] : b_.ops[static_cast<size_t>(s.b)];
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
      if (s.status != PairStatus::kIdentical) out_.differing.push_back(rowOf(s));
      return;
    }
    if (s.partner >= 0) return settleMoved(s);
    if (s.pending) {  // never paired: it leaves the pending events of its key (their oldest)
      auto it = pending_.find(s.move_key);
      it->second.pop_front();
      if (it->second.empty()) pending_.erase(it);
    }
    const OpRecord* oa = opAt(a_, s.a);
    const OpRecord* ob = opAt(b_, s.b);
    s.status = statusOf(oa, ob);
    record(rowOf(s), oa, ob);
  }

  // The earlier half of a moved event: the pair is classified now, at the earlier place.
  void settleMoved(Slot& s) {
    Slot& later = slotAt(s.partner_pos);
    const int64_t ia = s.a >= 0 ? s.a : later.a, ib = s.b >= 0 ? s.b : later.b;
    const OpRecord* oa = opAt(a_, ia);
    const OpRecord* ob = opAt(b_, ib);
    PairStatus status = statusOf(oa, ob);
    if (status == PairStatus::kIdentical) status = PairStatus::kReordered;
    s.status = later.status = status;
    later.settled = true;
    ++out_.counts[status];
    out_.differing.push_back(rowOf(s));
    if (status == PairStatus::kReordered) return;
    int64_t before = s.a >= 0 ? s.collectives_before : later.collectives_before;
    considerFirst(PairDiff{ia, ib, status, before, ib}, oa, ob);
  }

  PairDiff rowOf(const Slot& s) const {
    return PairDiff{s.a, s.b, s.status, s.collectives_before, s.partner};
  }

  void record(const PairDiff& d, const OpRecord* oa, const OpRecord* ob) {
    ++out_.counts[d.status];
    if (d.status == PairStatus::kIdentical) return;
    out_.differing.push_back(d);
    considerFirst(d, oa, ob);
  }

  void considerFirst(const PairDiff& d, const OpRecord* oa, const OpRecord* ob) {
    bool marker = (oa && oa->kind() == db::EventKind::kMarker) ||
                  (ob && ob->kind() == db::EventKind::kMarker);
    bool anchor = (oa && oa->anchor) || (ob && ob->anchor);
    if (!out_.first && !marker && (!batch_ || anchor)) out_.first = d;
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
      status = classifyBatch(a_, *oa, b_, *ob);
    } else if (batch_) {
      // Kernels carry no fingerprints: in batch mode their selection may differ legitimately.
      status =
          a_.choice(*oa) != b_.choice(*ob) ? PairStatus::kKernelSelection : PairStatus::kIdentical;
    } else {
      status = classify(a_, *oa, b_, *ob, out_.first.has_value());
    }
    noteCollectiveChoice(*oa, *ob);
    return status;
  }

  // Two collectives of the same kind (and, run to run, size) that NCCL ran differently: a row of
  // the NCCL choice table, with what became of their outputs.
  void noteCollectiveChoice(const OpRecord& oa, const OpRecord& ob) {
    const db::Collective* ca = a_.collective(oa);
    const db::Collective* cb = b_.collective(ob);
    if (ca == nullptr || cb == nullptr || a_.choice(oa) == b_.choice(ob)) return;
    CollectiveChoiceChange c;
    c.op = ca->op;
    c.dtype = ca->dtype;
    c.count_a = ca->count;
    c.count_b = cb->count;
    c.algo_a = algoName(a_, ca->algo);
    c.proto_a = algoName(a_, ca->proto);
    c.channels_a = ca->channels;
    c.algo_b = algoName(b_, cb->algo);
    c.proto_b = algoName(b_, cb->proto);
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
    if (batch_) return rowsStatus(a_, oa, b_, ob).value_or(PairStatus::kSchedule);
    if (!fingerprintsOf(a_, oa).has_outputs || !fingerprintsOf(b_, ob).has_outputs) {
      return PairStatus::kSchedule;
    }
    return contentStatus(a_, oa, b_, ob, out_.first.has_value());
  }

  const RankOps& a_;
  const RankOps& b_;
  const bool batch_;
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

// "algo 66 tile 27 split-K 1 ...", leaving out what the recorder did not know (-1).
std::string gemmChoiceText(const GemmInfo& g) {
  std::string out;
  auto add = [&](const char* label, int32_t v) {
    if (v >= 0) out += fmt::format("{}{} {}", out.empty() ? "" : " ", label, v);
  };
  add("algo", g.algo_id);
  add("tile", g.tile);
  add("split-K", g.split_k);
  add("reduction", g.reduction_scheme);
  add("stages", g.stages);
  add("swizzle", g.swizzle);
  add("custom", g.custom_option);
  return out.empty() ? "algorithm unknown" : out;
}

std::string collectiveChoiceText(const RankOps& r, const db::Collective& c) {
  return fmt::format("{}/{}/{} ch", r.name(c.algo).empty() ? "?" : r.name(c.algo),
                     r.name(c.proto).empty() ? "?" : r.name(c.proto), c.channels);
}

// What ran the op: kernel name, GEMM algorithm or NCCL algorithm/protocol/channels.
std::string choiceText(const RankOps& r, const OpRecord& op) {
  if (const GemmInfo* g = r.gemm(op)) return gemmChoiceText(*g);
  if (const db::Collective* c = r.collective(op)) return collectiveChoiceText(r, *c);
  return r.name(op.name);
}

// The seq of `op` in its RankOps (ops are stored at their sequence number).
int64_t seqOf(const RankOps& r, const OpRecord& op) { return &op - r.ops.data(); }

// The kernels an op launched (they follow it and name it as parent), as "k1, k2".
std::string childKernels(const RankOps& r, int64_t seq) {
  std::string out;
  for (int64_t s = seq + 1; s < static_cast<int64_t>(r.ops.size()) && s <= seq + 64; ++s) {
    const OpRecord& op = r.ops[static_cast<size_t>(s)];
    if (op.parent != seq || op.kind() != db::EventKind::kKernel) continue;
    out += fmt::format("{}{}", out.empty() ? "" : ", ", shortKernelName(r.name(op.name), 90));
  }
  return out;
}

// "X in A, Y in B": the algorithm if the recorder knew it and it differs, else the kernels run.
std::string ranText(const RankOps& a, const OpRecord& oa, const RankOps& b, const OpRecord& ob) {
  std::string ca = choiceText(a, oa), cb = choiceText(b, ob);
  if (ca != cb) return fmt::format("{} in A, {} in B", ca, cb);
  std::string ka = childKernels(a, seqOf(a, oa)), kb = childKernels(b, seqOf(b, ob));
  if (ka != kb) return fmt::format("{} ran {} in A and {} in B", ca, ka, kb);
  return "";
}


// Collective identity across ranks: (communicator, sequence number).
using CollectiveId = std::pair<int64_t, int64_t>;

// What diffRuns keeps of a rank once its ops are dropped: the collectives among its differing
// pairs (run A's side), for propagation across ranks.
struct RankScratch {
  std::vector<std::pair<size_t, CollectiveId>> differing_collectives;  // index into differing
  bool first_is_collective = false;
};

RankScratch scratchOf(const RankOps& a, const RankDiff& rd) {
  RankScratch s;
  for (size_t i = 0; i < rd.differing.size(); ++i) {
    const OpRecord* op = opAt(a, rd.differing[i].a);
    if (op == nullptr) continue;
    if (const db::Collective* c = a.collective(*op)) {
      s.differing_collectives.emplace_back(i, CollectiveId{c->comm_id, c->comm_seq});
    }
  }
  const OpRecord* first = rd.first ? opAt(a, rd.first->a) : nullptr;
  s.first_is_collective = first != nullptr && first->kind() == db::EventKind::kCollective;
  return s;
}

// Gives the row in B of a moved event the status of its row in A, `in_a` (both halves are rows).
void syncMovedHalfInB(std::vector<PairDiff>& differing, const PairDiff& in_a) {
  for (PairDiff& d : differing) {
    if (d.a < 0 && d.b == in_a.partner) d.status = in_a.status;
  }
}

// A collective whose local inputs matched can still differ because another rank's inputs did.
void propagateAcrossRanks(std::vector<RankDiff>& ranks, const std::vector<RankScratch>& scratch) {
  std::set<CollectiveId> fed_by_divergence;
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& [i, id] : scratch[r].differing_collectives) {
      if (ranks[r].differing[i].status == PairStatus::kPropagated) fed_by_divergence.insert(id);
    }
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankDiff& rd = ranks[r];
    for (const auto& [i, id] : scratch[r].differing_collectives) {
      PairDiff& d = rd.differing[i];
      if (d.status == PairStatus::kNondeterministic && fed_by_divergence.count(id)) {
        --rd.counts[d.status];
        d.status = PairStatus::kPropagated;
        ++rd.counts[d.status];
        if (d.moved()) syncMovedHalfInB(rd.differing, d);
      }
    }
    if (auto& first = rd.first) {
      for (const PairDiff& d : rd.differing) {
        // Only collectives (rows of run A; a moved one's first names its row in A) change here,
        // and a propagated collective needs no ops to explain.
        if (d.a >= 0 && d.a == first->a && first->status != d.status) {
          first->status = d.status;
          rd.why = propagatedText();
        }
      }
    }
  }
}

// For a divergence that is already in an op's inputs when it is first seen: the stretch of
// unfingerprinted kernels it entered through (since the last op whose outputs were fingerprinted).
int64_t lastFingerprintedBefore(const RankOps& a, int64_t seq) {
  for (int64_t s = seq - 1; s >= 0; --s) {
    const OpRecord& op = a.ops[static_cast<size_t>(s)];
    if (op.anchor && fingerprintsOf(a, op).has_outputs) return s;
  }
  return -1;
}

std::string enteredThrough(const RankOps& a, int64_t seq) {
  int64_t from = lastFingerprintedBefore(a, seq);
  std::vector<std::string> names;
  int64_t kernels = 0;
  for (int64_t s = from + 1; s < seq; ++s) {
    const OpRecord& op = a.ops[static_cast<size_t>(s)];
    // Kernels a fingerprinted op launched are covered by its output fingerprints.
    if (op.kind() != db::EventKind::kKernel || (from >= 0 && op.parent >= from)) continue;
    ++kernels;
    const std::string& n = a.name(op.name);
    if (names.size() < 4 && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::string list;
  for (const std::string& n : names) list += fmt::format("{}{:.80}", list.empty() ? "" : "; ", n);
  return fmt::format(
      "; it entered between {} and this op, through {} kernel(s) without fingerprints{}{}{}: one of "
      "them produced different bytes",
      from >= 0 ? fmt::format("event {} (whose outputs still matched)", from) : "the start",
      kernels, names.empty() ? "" : " (", list, names.empty() ? "" : ")");
}

std::string explain(const RankOps& a, const RankOps& b, const PairDiff& d, bool first) {
  const OpRecord* oa = opAt(a, d.a);
  const OpRecord* ob = opAt(b, d.b);
  switch (d.status) {
    case PairStatus::kKernelSelection: {
      return fmt::format("kernel selection changed: {} in A, {} in B, for the same op and shape",
                         choiceText(a, *oa), choiceText(b, *ob));
    }
    case PairStatus::kNondeterministic:
      return fingerprintsOf(a, *oa).has_inputs && fingerprintsOf(b, *ob).has_inputs
                 ? "nondeterministic: identical input fingerprints, different output fingerprints"
                 : "outputs differ and nothing diverged before it on this rank (inputs not "
                   "fingerprinted)";
    case PairStatus::kPropagated:
      // The first divergence of a rank, in an op that is not a collective (which may carry another
      // rank's divergence): it came through the unfingerprinted kernels before it.
      if (first && oa && oa->kind() != db::EventKind::kCollective) {
        return "its inputs already differed" + enteredThrough(a, d.a);
      }
      return propagatedText();
    case PairStatus::kSchedule:
      return oa && ob ? "schedule difference: the runs' op sequences could not be aligned here"
                      : fmt::format("schedule or shape difference: this op exists only in run {}",
                                    oa ? "A" : "B");
    case PairStatus::kBatchVariant: {
      std::string ran = ranText(a, *oa, b, *ob);
      return fmt::format("batch-variant: the request's input rows are the same in both runs but its "
                         "output rows differ; {}",
                         ran.empty() ? "the same kernels ran in both"
                                     : "the kernel choice changed with the batch: " + ran);
    }
    case PairStatus::kReordered:
      return "reordered: the same op with the same contents, at another place relative to the rest";
    case PairStatus::kIdentical:
      return "identical";
  }
  return "";
}

// explain(), and for a moved event where it ran in each run.
std::string explainMoved(const RankOps& a, const RankOps& b, const PairDiff& d, bool first) {
  std::string why = explain(a, b, d, first);
  if (!d.moved() || d.a < 0 || d.b < 0) return why;
  return why + fmt::format(" (it also ran in another order relative to the rest: event {} in A, "
                           "{} in B, another thread's or stream's work)",
                           d.a, d.b);
}

void addSelectionChanges(const RankOps& a, const RankOps& b, const RankDiff& rd,
                         std::map<std::tuple<int, std::string, std::string>, int64_t>& table) {
  for (const PairDiff& d : rd.differing) {
    // A moved event counts once, by its row in A (whose partner is its seq in B).
    if (d.status != PairStatus::kKernelSelection || d.a < 0) continue;
    const OpRecord* oa = opAt(a, d.a);
    const OpRecord* ob = opAt(b, d.moved() ? d.partner : d.b);
    if (oa == nullptr || ob == nullptr) continue;
    ++table[{static_cast<int>(oa->kind()), choiceText(a, *oa), choiceText(b, *ob)}];
  }
}

}  // namespace

const char* pairStatusName(PairStatus status) {
  switch (status) {
    case PairStatus::kIdentical: return "identical";
    case PairStatus::kKernelSelection: return "kernel selection changed";
    case PairStatus::kNondeterministic: return "nondeterministic";
    case PairStatus::kPropagated: return "propagated";
    case PairStatus::kSchedule: return "schedule or shape difference";
    case PairStatus::kBatchVariant: return "batch-variant";
    case PairStatus::kReordered: return "reordered";
  }
  return "unknown";
}

int64_t RankDiff::count(PairStatus status) const {
  auto it = counts.find(status);
  return it != counts.end() ? it->second : 0;
}

int64_t RankDiff::differingEvents() const {
  int64_t n = 0;
  for (const PairDiff& d : differing) {
    if (d.status == PairStatus::kReordered || (d.moved() && d.a < 0)) continue;
    ++n;
  }
  return n;
}

const char* CollectiveChoiceChange::rows() const {
  if (changed > 0) return "changed";
  return unchanged == calls ? "unchanged" : "unknown";
}

RankDiff diffRank(const RankOps& a, const RankOps& b, bool batch) {
  return RankDiffer(a, b, batch).run();
}

BatchDim batchDimOf(const RankOps& a, const RankOps& b) {
  size_t n = std::min({a.gemms.size(), b.gemms.size(), size_t{256}});
  bool m_differs = false, n_differs = false;
  for (size_t i = 0; i < n; ++i) {
    const GemmInfo& x = a.gemms[i];
    const GemmInfo& y = b.gemms[i];
    if (x.k != y.k) return BatchDim::kNone;
    m_differs |= x.m != y.m;
    n_differs |= x.n != y.n;
  }
  if (m_differs == n_differs) return BatchDim::kNone;  // neither, or both: not a batch pair
  return m_differs ? BatchDim::kM : BatchDim::kN;
}

std::string describeOp(const RankOps& r, int64_t seq) {
  const OpRecord* op = opAt(r, seq);
  if (op == nullptr) return "(none)";
  if (const GemmInfo* gemm = r.gemm(*op)) {
    const GemmInfo& g = *gemm;
    return fmt::format("GEMM {} m={} n={} k={} {}{} {} ({})", r.name(g.api), g.m, g.n, g.k,
                       g.trans_a ? "T" : "N", g.trans_b ? "T" : "N", db::dtypeName(g.a_dtype),
                       gemmChoiceText(g));
  }
  if (const db::Collective* coll = r.collective(*op)) {
    const db::Collective& c = *coll;
    // NCCL's calls go by their op; a program's own (detrace/annotate.h) by its name too, and by
    // the kernels it launched where NCCL's choices would be.
    const std::string& name = r.name(op->name);
    const bool nccl = name.empty() || name.starts_with("nccl");
    const std::string ran = c.channels >= 0 || !r.name(c.algo).empty() ? collectiveChoiceText(r, c)
                                                                        : childKernels(r, seq);
    return fmt::format("{}{} {} count={} {} rank {}/{} comm seq {}{}", nccl ? "" : name + ": ",
                       db::collOpName(c.op), db::dtypeName(c.dtype), c.count,
                       db::redOpName(c.redop), c.comm_rank, c.comm_nranks, c.comm_seq,
                       ran.empty() ? "" : " (" + ran + ")");
  }
  return fmt::format("{} {}", db::eventKindName(op->kind()), shortKernelName(r.name(op->name)));
}

std::string shortKernelName(const std::string& name, size_t max) {
  // Drop the parameter list (often longer than the rest), then cap the length.
  static constexpr std::string_view kAnon = "(anonymous namespace)";
  std::string out;
  int angle = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c == '(' && std::string_view(name).substr(i, kAnon.size()) == kAnon) {
      out += kAnon;
      i += kAnon.size() - 1;
      continue;
    }
    if (c == '<') ++angle;
    if (c == '>' && angle > 0) --angle;
    if (c == '(' && angle == 0) break;
    out += c;
  }
  if (out.size() > max) out = out.substr(0, max - 3) + "...";
  return out;
}

namespace {
// Loads one rank of both runs at once (each reader is its own connection, so two threads can).
Result<std::pair<RankOps, RankOps>> loadBoth(db::TraceReader& ra, db::TraceReader& rb, int32_t rank,
                                             const KeyOptions& keys) {
  std::mutex heavy;
  std::optional<Result<RankOps>> b;
  std::thread other([&] { b.emplace(loadRankOps(rb, rank, keys, {&heavy, /*operands_last=*/true})); });
  Result<RankOps> a = loadRankOps(ra, rank, keys, {&heavy, /*operands_last=*/false});
  other.join();
  if (!a.isOk()) return a.status();
  if (!b->isOk()) return b->status();
  return std::make_pair(std::move(a).value(), std::move(*b).value());
}
}  // namespace

namespace {

// The deep window records of a rank, compared run to run (batch mode compares rows instead).
Status addDeep(const RankOps& a, const RankOps& b, bool batch, db::TraceReader& ra,
               db::TraceReader& rb, RankDiff& rd, std::vector<std::string>& warnings) {
  if (batch) {
    if (deepLaunchCount(a) + deepLaunchCount(b) > 0) {
      warnings.push_back(fmt::format(
          "rank {}: deep window records are compared run to run only; batch-size mode compares "
          "the request's rows",
          rd.rank));
    }
    return Status::ok();
  }
  DETRACE_ASSIGN_OR_RETURN(rd.deep, diffDeep(a, b, rd, ra, rb));
  if (rd.deep && (rd.deep->launches_a == 0 || rd.deep->launches_b == 0)) {
    warnings.push_back(fmt::format(
        "rank {}: only run {} has deep window records; record both runs with the same --deep "
        "window to compare launches",
        rd.rank, rd.deep->launches_a > 0 ? "A" : "B"));
    rd.deep.reset();
  }
  return Status::ok();
}

// The first divergence is the deep window's origin: name what deep mode saw.
bool firstIsDeepOrigin(const RankDiff& rd) {
  return rd.first && rd.deep && rd.deep->origin && !rd.deep->before_window &&
         rd.deep->origin->a == rd.first->a && rd.first->status == PairStatus::kNondeterministic;
}

// Everything the report says about a rank's first divergence, while its ops are loaded.
void describeFirst(const RankOps& a, const RankOps& b, RankDiff& rd) {
  if (!rd.first) return;
  const PairDiff& f = *rd.first;
  rd.first_a = f.a >= 0 ? describeOp(a, f.a) : "(absent)";
  rd.first_b = f.b >= 0 ? describeOp(b, f.b) : "(absent)";
  rd.why = firstIsDeepOrigin(rd) ? "nondeterministic: its memory before the launch matched in both "
                                   "runs and differs after it (deep window)"
                                 : explainMoved(a, b, f, /*first=*/true);
  const OpRecord* op = opAt(a, f.a);
  if (f.status == PairStatus::kPropagated && op && op->kind() != db::EventKind::kCollective) {
    rd.entered_after = lastFingerprintedBefore(a, f.a);
  }
  const RankOps& side = f.a >= 0 ? a : b;
  int64_t seq = f.a >= 0 ? f.a : f.b;
  rd.position = positionAt(side, seq);
  rd.landmark = landmarkAt(side, seq);
  if (f.a >= 0 && f.b >= 0) {
    std::vector<std::string> in_b = positionAt(b, f.b);
    if (in_b != rd.position) rd.position_b = std::move(in_b);
  }
}

// The warnings a rank's alignment deserves.
void alignmentWarnings(const RankDiff& rd, std::vector<std::string>& warnings) {
  int64_t most = std::max(rd.anchors_a, rd.anchors_b);
  if (most >= 4 && rd.anchors_matched * 2 < most) {
    warnings.push_back(fmt::format(
        "rank {}: only {} of {} library ops (GEMMs, collectives) align: these look like runs of "
        "different programs or inputs, so the verdict below is weak",
        rd.rank, rd.anchors_matched, most));
  }
  if (!rd.exact_alignment) {
    warnings.push_back(fmt::format(
        "rank {}: the runs differ too much to align exactly; parts were paired by position",
        rd.rank));
  }
}

// The rank where divergence began: the earliest divergence in causal order (fewest collectives
// before it); on a tie, one that is not merely propagated, then the lowest rank. Among ties, a
// divergence that arrived through a collective came from another rank.
std::optional<int32_t> originOf(const std::vector<RankDiff>& ranks,
                                const std::vector<RankScratch>& scratch) {
  const RankDiff* best = nullptr;
  std::tuple<int64_t, int, int32_t> best_key;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankDiff& rd = ranks[r];
    if (!rd.first) continue;
    bool propagated = rd.first->status == PairStatus::kPropagated;
    bool via_collective = propagated && scratch[r].first_is_collective;
    int rank_class = via_collective ? 2 : propagated ? 1 : 0;
    auto key = std::make_tuple(rd.first->collectives_before, rank_class, rd.rank);
    if (best == nullptr || key < best_key) {
      best = &rd;
      best_key = key;
    }
  }
  return best ? std::optional<int32_t>(best->rank) : std::nullopt;
}

}  // namespace

Result<RunDiff> diffRuns(const db::Run& run_a, const db::Run& run_b, const DiffOptions& options) {
  RunDiff out;
  const std::optional<int32_t> only = options.rank;
  if (run_a.worldSize() != run_b.worldSize()) {
    out.warnings.push_back(fmt::format("the runs have different world sizes ({} and {}): only "
                                       "ranks present in both are compared",
                                       run_a.worldSize(), run_b.worldSize()));
  }
  std::vector<RankScratch> scratch;
  std::optional<KeyOptions> keys;  // decided on the first rank
  bool fingerprinted_a = false, fingerprinted_b = false;
  std::map<std::tuple<int, std::string, std::string>, int64_t> table;
  std::map<ChoiceKey, CollectiveChoiceChange> choices;
  for (const db::RankFile& rf : run_a.ranks()) {
    if (only && rf.rank != *only) continue;
    if (run_b.findRank(rf.rank) == nullptr) {
      out.warnings.push_back(fmt::format("rank {} is missing from run B", rf.rank));
      continue;
    }
    DETRACE_ASSIGN_OR_RETURN(auto ra, run_a.openRank(rf.rank));
    DETRACE_ASSIGN_OR_RETURN(auto rb, run_b.openRank(rf.rank));
    DETRACE_ASSIGN_OR_RETURN(auto pair, loadBoth(*ra, *rb, rf.rank, keys.value_or(KeyOptions{})));
    if (!keys) {
      BatchDim batch_dim = batchDimOf(pair.first, pair.second);
      out.batch_mode = options.batch.value_or(batch_dim != BatchDim::kNone);
      if (out.batch_mode && batch_dim == BatchDim::kNone) batch_dim = BatchDim::kM;  // forced on
      keys = KeyOptions{};
      if (out.batch_mode) {
        // Reload with keys that leave out the token dimension, and with the rows.
        keys = KeyOptions{.batch_dim = batch_dim, .rows = true};
        pair = {};
        DETRACE_ASSIGN_OR_RETURN(pair, loadBoth(*ra, *rb, rf.rank, *keys));
      }
    }
    const RankOps& a = pair.first;
    const RankOps& b = pair.second;
    RankDiff rd = diffRank(a, b, out.batch_mode);
    DETRACE_RETURN_IF_ERROR(addDeep(a, b, out.batch_mode, *ra, *rb, rd, out.warnings));
    fingerprinted_a |= a.fingerprinted;
    fingerprinted_b |= b.fingerprinted;
    describeFirst(a, b, rd);
    addSelectionChanges(a, b, rd, table);
    for (const CollectiveChoiceChange& c : rd.collective_choices) {
      auto [it, fresh] = choices.try_emplace(choiceKey(c), c);
      if (!fresh) mergeChoice(it->second, c);
    }
    scratch.push_back(scratchOf(a, rd));
    out.ranks.push_back(std::move(rd));
  }
  for (const db::RankFile& rf : run_b.ranks()) {
    if ((!only || rf.rank == *only) && run_a.findRank(rf.rank) == nullptr) {
      out.warnings.push_back(fmt::format("rank {} is missing from run A", rf.rank));
    }
  }
  if (only && out.ranks.empty()) {
    return makeError(ErrorCode::kNotFound, "rank {} is not in both runs", *only);
  }
  propagateAcrossRanks(out.ranks, scratch);
  for (auto [fingerprinted, label] : {std::pair{fingerprinted_a, "A"}, std::pair{fingerprinted_b, "B"}}) {
    if (!out.ranks.empty() && !fingerprinted) {
      out.unfingerprinted = true;
      out.warnings.push_back(fmt::format(
          "run {} has no fingerprints: only kernel-selection and schedule differences can be "
          "found; record with fingerprints to find nondeterministic and batch-variant ops",
          label));
    }
  }
  for (const RankDiff& rd : out.ranks) alignmentWarnings(rd, out.warnings);
  for (const auto& [key, count] : table) {
    out.selection_changes.push_back(
        {static_cast<db::EventKind>(std::get<0>(key)), std::get<1>(key), std::get<2>(key), count});
  }
  for (auto& [key, c] : choices) out.collective_choice_changes.push_back(std::move(c));
  out.origin_rank = originOf(out.ranks, scratch);
  return out;
}

Result<RunGroups> groupRuns(const std::vector<db::Run>& runs, const DiffOptions& options) {
  std::vector<std::vector<size_t>> classes;
  for (size_t i = 0; i < runs.size(); ++i) {
    bool placed = false;
    for (auto& c : classes) {
      DETRACE_ASSIGN_OR_RETURN(RunDiff d, diffRuns(runs[c.front()], runs[i], options));
      if (d.identical()) {
        c.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) classes.push_back({i});
  }
  std::stable_sort(classes.begin(), classes.end(),
                   [](const auto& x, const auto& y) { return x.size() > y.size(); });
  RunGroups groups;
  groups.classes = std::move(classes);
  for (size_t k = 1; k < groups.classes.size(); ++k) {
    DETRACE_ASSIGN_OR_RETURN(RunDiff d, diffRuns(runs[groups.classes[0].front()],
                                                 runs[groups.classes[k].front()], options));
    groups.explanations.push_back(std::move(d));
  }
  return groups;
}

}  // namespace detrace::replay
