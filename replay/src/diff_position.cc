// Where an op sits in its program, for the diff report: the NVTX ranges open around it ("step 3 ›
// layer 5"), or, in traces without markers, a landmark counted from the library ops ("GEMM 6 of
// 40"). Computed on demand for the few ops a report names, by replaying the markers before it
// (those before a window are already folded into its prelude).
#include <algorithm>

#include <fmt/format.h>

#include "detrace/replay/ops.h"

namespace detrace::replay {

std::vector<std::string> positionAt(const RankOps& r, int64_t seq) {
  MarkerState state = r.prelude.markers;
  for (const MarkerRecord& m : r.markers) {
    if (m.seq >= seq) break;
    state.apply(m);
  }
  std::vector<std::string> out;
  if (state.step) {
    std::string text = r.name(state.step->name);
    if (text.empty()) text = fmt::format("step {}", state.step->value);
    bool named = std::any_of(state.open.begin(), state.open.end(),
                             [&](const MarkerState::Open& o) { return r.name(o.name) == text; });
    if (!named) out.push_back(text);
  }
  for (const MarkerState::Open& o : state.open) {
    const std::string& text = r.name(o.name);
    out.push_back(text.empty() ? "(unnamed range)" : text);
  }
  return out;
}

namespace {

// The number (from 0) of the last GEMM before `seq`, -1 if none.
int64_t lastGemmBefore(const RankOps& r, int64_t seq) {
  for (int64_t s = std::min(seq, r.end()) - 1; s >= r.base; --s) {
    const OpRecord& prev = *r.at(s);
    const OpExtra* px = r.extra(prev);
    if (prev.kind() == db::EventKind::kGemm && px != nullptr && px->detail >= 0) return px->detail;
  }
  return r.prelude.last_gemm;
}

}  // namespace

std::string landmarkAt(const RankOps& r, int64_t seq) {
  const OpRecord* op = r.at(seq);
  if (op == nullptr) return "";
  const OpExtra* x = r.extra(*op);
  if (op->kind() == db::EventKind::kGemm && x != nullptr && x->detail >= 0) {
    return fmt::format("GEMM {} of {}", x->detail + 1, r.gemm_count);
  }
  if (op->kind() == db::EventKind::kCollective && x != nullptr && x->detail >= 0) {
    return fmt::format("collective {} of {}", x->detail + 1, r.collective_count);
  }
  std::string what = db::eventKindName(op->kind());
  if (int64_t gemm = lastGemmBefore(r, seq); gemm >= 0) {
    return fmt::format("{} after GEMM {} of {}", what, gemm + 1, r.gemm_count);
  }
  return r.gemm_count > 0 ? fmt::format("{} before the first GEMM", what)
                          : fmt::format("{} {} of {}", what, seq + 1, r.size());
}

}  // namespace detrace::replay
