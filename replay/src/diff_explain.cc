// Ops and verdicts in words, for the diff report: what an op is and what ran it, why a pair was
// classified so, and everything the report says about a rank's first divergence. It reads the
// rank's window (ops.h) around the op it names, and the window's prelude for what came before.
#include <algorithm>

#include <fmt/format.h>

#include "diff_internal.h"

namespace detrace::replay {
namespace {

// The seq of `op` in its RankOps (ops are stored at their sequence number).
int64_t seqOf(const RankOps& r, const OpRecord& op) { return r.base + (&op - r.ops.data()); }

// The kernels an op launched (they follow it and name it as parent), as "k1, k2".
std::string childKernels(const RankOps& r, int64_t seq) {
  std::string out;
  for (int64_t s = seq + 1; s < r.end() && s <= seq + kChildKernelScan; ++s) {
    const OpRecord& op = *r.at(s);
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

// For a divergence that is already in an op's inputs when it is first seen: the last library op
// before it whose outputs were fingerprinted, and the kernels without fingerprints since (the
// prelude holds them for the events before the window).
KernelsSince kernelsBefore(const RankOps& a, int64_t seq) {
  int64_t from = -1;
  for (int64_t s = std::min(seq, a.end()) - 1; s >= a.base && from < 0; --s) {
    const OpRecord& op = *a.at(s);
    if (op.anchor && fingerprintsOf(a, op).has_outputs) from = s;
  }
  KernelsSince k = a.prelude.since;
  if (from >= 0) k = KernelsSince{from, 0, {}};
  for (int64_t s = std::max(k.from + 1, a.base); s < seq; ++s) k.add(a, *a.at(s));
  return k;
}

std::string enteredThrough(const RankOps& a, int64_t seq) {
  KernelsSince k = kernelsBefore(a, seq);
  std::string list;
  for (int32_t n : k.names) list += fmt::format("{}{:.80}", list.empty() ? "" : "; ", a.name(n));
  return fmt::format(
      "; it entered between {} and this op, through {} kernel(s) without fingerprints{}{}{}: one "
      "of "
      "them produced different bytes",
      k.from >= 0 ? fmt::format("event {} (whose outputs still matched)", k.from) : "the start",
      k.count, k.names.empty() ? "" : " (", list, k.names.empty() ? "" : ")");
}

std::string explain(const RankOps& a, const RankOps& b, const PairDiff& d, bool first) {
  const OpRecord* oa = a.at(d.a);
  const OpRecord* ob = b.at(d.b);
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
      return fmt::format(
          "batch-variant: the request's input rows are the same in both runs but its "
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
  return why + fmt::format(
                   " (it also ran in another order relative to the rest: event {} in A, "
                   "{} in B, another thread's or stream's work)",
                   d.a, d.b);
}

// The first divergence is the deep window's origin: name what deep mode saw.
bool firstIsDeepOrigin(const RankDiff& rd, const DeepDiff* deep) {
  return rd.first && deep && deep->origin && !deep->before_window &&
         deep->origin->a == rd.first->a && rd.first->status == PairStatus::kNondeterministic;
}

}  // namespace

std::string propagatedText() { return "propagated: its inputs already differed"; }

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

void describeFirst(const RankOps& a, const RankOps& b, const DeepDiff* deep, RankDiff& rd) {
  if (!rd.first) return;
  const PairDiff& f = *rd.first;
  rd.first_a = f.a >= 0 ? describeOp(a, f.a) : "(absent)";
  rd.first_b = f.b >= 0 ? describeOp(b, f.b) : "(absent)";
  rd.why = firstIsDeepOrigin(rd, deep) ? "nondeterministic: its memory before the launch matched "
                                         "in both runs and differs after it (deep window)"
                                       : explainMoved(a, b, f, /*first=*/true);
  const OpRecord* op = a.at(f.a);
  if (f.status == PairStatus::kPropagated && op && op->kind() != db::EventKind::kCollective) {
    rd.entered_after = kernelsBefore(a, f.a).from;
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

std::string describeOp(const RankOps& r, int64_t seq) {
  const OpRecord* op = r.at(seq);
  if (op == nullptr) return "(none)";
  if (const GemmInfo* gemm = r.gemm(*op)) {
    const GemmInfo& g = *gemm;
    return fmt::format("GEMM {} m={} n={} k={} {}{} {}{} ({})", r.name(g.api), g.m, g.n, g.k,
                       g.trans_a ? "T" : "N", g.trans_b ? "T" : "N", db::dtypeName(g.a_dtype),
                       g.epilogue > 1 ? " epilogue " + db::epilogueText(g.epilogue) : "",
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
                       db::redOpText(c), c.comm_rank, c.comm_nranks, c.comm_seq,
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

}  // namespace detrace::replay
