// Where an op sits in its program, for the diff report: the NVTX ranges open around it ("step 3 ›
// layer 5"), or, in traces without markers, a landmark counted from the library ops ("GEMM 6 of
// 40"). Computed on demand for the few ops a report names, by replaying the markers before it.
#include <algorithm>

#include <fmt/format.h>

#include "detrace/replay/ops.h"

namespace detrace::replay {
namespace {

struct OpenRange {
  int64_t domain, value;
  int32_t name;
};

// Closes the range `end` ends: the open one with the same (domain, range id) if the end carries an
// id (nvtxRangeStart/End may end out of order), else the innermost one (nvtxRangePush/Pop).
void closeRange(std::vector<OpenRange>& open, const MarkerRecord& end) {
  if (end.value >= 0) {
    for (size_t i = open.size(); i-- > 0;) {
      if (open[i].value == end.value && open[i].domain == end.domain) {
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }
  if (!open.empty()) open.pop_back();  // an unmatched end: treat as a pop
}

}  // namespace

std::vector<std::string> positionAt(const RankOps& r, int64_t seq) {
  std::vector<OpenRange> open;
  const MarkerRecord* step = nullptr;
  for (const MarkerRecord& m : r.markers) {
    if (m.seq >= seq) break;
    switch (m.kind) {
      case db::MarkerKind::kRangeStart: open.push_back({m.domain, m.value, m.name}); break;
      case db::MarkerKind::kRangeEnd: closeRange(open, m); break;
      case db::MarkerKind::kStep: step = &m; break;
      case db::MarkerKind::kInstant: break;
    }
  }
  std::vector<std::string> out;
  if (step != nullptr) {
    std::string text = r.name(step->name);
    if (text.empty()) text = fmt::format("step {}", step->value);
    bool named = std::any_of(open.begin(), open.end(),
                             [&](const OpenRange& o) { return r.name(o.name) == text; });
    if (!named) out.push_back(text);
  }
  for (const OpenRange& o : open) {
    const std::string& text = r.name(o.name);
    out.push_back(text.empty() ? "(unnamed range)" : text);
  }
  return out;
}

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
  for (int64_t s = seq - 1; s >= 0; --s) {
    const OpRecord& prev = r.ops[static_cast<size_t>(s)];
    const OpExtra* px = r.extra(prev);
    if (prev.kind() == db::EventKind::kGemm && px != nullptr && px->detail >= 0) {
      return fmt::format("{} after GEMM {} of {}", what, px->detail + 1, r.gemm_count);
    }
  }
  return r.gemm_count > 0 ? fmt::format("{} before the first GEMM", what)
                          : fmt::format("{} {} of {}", what, seq + 1, r.size());
}

}  // namespace detrace::replay
