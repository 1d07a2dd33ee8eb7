#include "detrace/replay/ops.h"

#include <algorithm>
#include <cctype>

namespace detrace::replay {

const std::string& RankOps::name(int64_t id) const {
  static const std::string kEmpty;
  return id > 0 && id < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(id)]
                                                           : kEmpty;
}

uint64_t RankOps::choice(const OpRecord& op) const {
  if (op.anchor) return extra(op)->choice;
  return op.name >= 0 && static_cast<size_t>(op.name) < name_choices.size()
             ? name_choices[static_cast<size_t>(op.name)]
             : 0;
}

const GemmInfo* RankOps::gemm(const OpRecord& op) const {
  const OpExtra* x = extra(op);
  if (op.kind() != db::EventKind::kGemm || x == nullptr || x->detail < 0) return nullptr;
  return &gemms[static_cast<size_t>(x->detail - gemm_base)];
}

const db::Collective* RankOps::collective(const OpRecord& op) const {
  const OpExtra* x = extra(op);
  if (op.kind() != db::EventKind::kCollective || x == nullptr || x->detail < 0) return nullptr;
  return &collectives[static_cast<size_t>(x->detail - collective_base)];
}

const RowOperand& RankOps::rowOperand(int64_t i) const {
  return row_operands[static_cast<size_t>(i - row_base)];
}

std::span<const uint64_t> RankOps::rows(const RowOperand& o) const {
  return std::span<const uint64_t>(row_digests)
      .subspan(static_cast<size_t>(o.begin - digest_base), static_cast<size_t>(o.end - o.begin));
}

void MarkerState::apply(const MarkerRecord& m) {
  switch (m.kind) {
    case db::MarkerKind::kRangeStart:
      open.push_back({m.domain, m.value, m.name});
      return;
    case db::MarkerKind::kStep:
      step = m;
      return;
    case db::MarkerKind::kInstant:
      return;
    case db::MarkerKind::kRangeEnd:
      break;
  }
  // The open range with the same (domain, range id) if the end carries an id (nvtxRangeStart/End
  // may end out of order), else the innermost one (nvtxRangePush/Pop).
  if (m.value >= 0) {
    for (size_t i = open.size(); i-- > 0;) {
      if (open[i].value == m.value && open[i].domain == m.domain) {
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }
  if (!open.empty()) open.pop_back();  // an unmatched end: treat as a pop
}

void KernelsSince::add(const RankOps& r, const OpRecord& op) {
  // Kernels a fingerprinted op launched are covered by its output fingerprints.
  if (op.kind() != db::EventKind::kKernel || (from >= 0 && op.parent >= from)) return;
  ++count;
  if (names.size() >= 4) return;
  const std::string& n = r.name(op.name);
  auto same = [&](int32_t id) { return r.name(id) == n; };
  if (std::none_of(names.begin(), names.end(), same)) names.push_back(op.name);
}

std::string kernelFamily(const std::string& name) {
  std::string out;
  int angle = 0, paren = 0;
  for (char c : name) {
    if (c == '<') ++angle;
    if (c == '(' && angle == 0) ++paren;  // the parameter list (not a functor's call operator)
    if (paren == 0 && !std::isdigit(static_cast<unsigned char>(c))) out += c;
    if (c == '>' && angle > 0) --angle;
    if (c == ')' && angle == 0 && paren > 0) --paren;
  }
  return out;
}

}  // namespace detrace::replay
