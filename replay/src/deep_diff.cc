// See deep_diff.h.
#include "detrace/replay/deep_diff.h"

#include <algorithm>

#include <fmt/format.h>

#include "detrace/replay/diff.h"

namespace detrace::replay {
namespace {

bool isDeepLaunch(const RankOps& r, int64_t seq) {
  const OpRecord* op = r.at(seq);
  // A kernel carries an extra record only when it has operand rows: deep mode's.
  return op != nullptr && op->kind() == db::EventKind::kKernel && op->extra >= 0;
}

DeepTarget& targetFor(std::vector<DeepTarget>& targets, const db::Operand& o, const RankOps& r) {
  if (targets.empty() || targets.back().slot != o.slot) {
    targets.push_back({o.slot, r.name(o.name), o.bytes, o.address, std::nullopt, std::nullopt});
  }
  return targets.back();
}

bool sameTarget(const DeepTarget& x, const DeepTarget& y) {
  return x.slot == y.slot && x.args == y.args && x.bytes == y.bytes &&
         x.pre.has_value() == y.pre.has_value() && x.post.has_value() == y.post.has_value();
}

bool comparable(const DeepLaunch& a, const DeepLaunch& b) {
  if (a.targets.size() != b.targets.size()) return false;
  for (size_t i = 0; i < a.targets.size(); ++i) {
    if (!sameTarget(a.targets[i], b.targets[i])) return false;
  }
  return true;
}

}  // namespace

DeepComparer::DeepComparer(db::TraceReader& ra, db::TraceReader& rb) : ra_(ra), rb_(rb) {
  out_.window = ra_.metaValue("deep_window");
}

Status DeepComparer::visit(const RankOps& a, const RankOps& b, int64_t seq, int64_t seq_b) {
  if (!isDeepLaunch(a, seq)) return Status::ok();
  const int64_t index = index_++;
  // An inexact alignment may pair unrelated kernels by position.
  if (!isDeepLaunch(b, seq_b) || a.at(seq)->key != b.at(seq_b)->key) {
    ++out_.unpaired;
    return Status::ok();
  }
  ++out_.compared;
  if (knownClean(*a.extra(*a.at(seq)), *b.extra(*b.at(seq_b)))) {
    ++out_.counts[DeepStatus::kClean];
    return Status::ok();
  }
  DETRACE_ASSIGN_OR_RETURN(auto rows_a, ra_.operands(seq));
  DETRACE_ASSIGN_OR_RETURN(auto rows_b, rb_.operands(seq_b));
  DeepLaunch la = deepLaunchOf(a, seq, rows_a), lb = deepLaunchOf(b, seq_b, rows_b);
  DeepVerdict v = classifyDeep(la, lb);
  ++out_.counts[v.status];
  if (out_.compared == 1) out_.before_window = v.status == DeepStatus::kPropagated;
  note(a, la, lb, v, index);
  return Status::ok();
}

std::optional<DeepDiff> DeepComparer::finish(const RankOps& a, const RankOps& b) {
  out_.launches_a = deepLaunchCount(a);
  out_.launches_b = deepLaunchCount(b);
  if (out_.launches_a == 0 && out_.launches_b == 0) return std::nullopt;
  return std::move(out_);
}

// Every digest of the pair matches, as the loaded per-op fingerprints (slot and digest of each
// row, in order) show: clean, without reading the rows. Allocations of other sizes differ in their
// digests, so such pairs are read, and found not comparable.
bool DeepComparer::knownClean(const OpExtra& x, const OpExtra& y) {
  return x.has_inputs && y.has_inputs && x.inputs == y.inputs && x.has_outputs && y.has_outputs &&
         x.outputs == y.outputs;
}

// Keeps the launches the report names.
void DeepComparer::note(const RankOps& a, const DeepLaunch& la, const DeepLaunch& lb,
                        const DeepVerdict& v, int64_t index) {
  if (v.status == DeepStatus::kOrigin) {
    if (!out_.origin) {
      out_.origin = named(a, la, lb, v, index);
    } else if (out_.other_origins.size() < DeepDiff::kMaxOtherOrigins) {
      out_.other_origins.push_back(named(a, la, lb, v, index));
    }
  }
  if (v.status == DeepStatus::kPropagated && !out_.first_propagated) {
    out_.first_propagated = named(a, la, lb, v, index);
  }
}

DeepNamed DeepComparer::named(const RankOps& a, const DeepLaunch& la, const DeepLaunch& lb,
                              const DeepVerdict& v, int64_t index) {
  DeepNamed n;
  n.a = la.seq;
  n.b = lb.seq;
  n.index = index;
  n.status = v.status;
  n.kernel = shortKernelName(a.name(a.at(la.seq)->name));
  for (size_t i = 0; i < la.targets.size(); ++i) {
    const DeepTarget& t = la.targets[i];
    bool differs = std::find(v.differing.begin(), v.differing.end(), i) != v.differing.end();
    n.memory.push_back({t.args, t.bytes, t.address, lb.targets[i].address, differs});
  }
  n.position = positionAt(a, la.seq);
  n.landmark = landmarkAt(a, la.seq);
  return n;
}

namespace {

// "a", "a and b", "a, b and c".
std::string joinAnd(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    out += i == 0 ? "" : i + 1 == items.size() ? " and " : ", ";
    out += items[i];
  }
  return out;
}

std::vector<const DeepMemory*> differingMemory(const DeepNamed& n) {
  std::vector<const DeepMemory*> out;
  for (const DeepMemory& m : n.memory) {
    if (m.differs) out.push_back(&m);
  }
  return out;
}

// The differing memory of `n` as a noun phrase: "arg2's allocation (8 MiB)", "the allocation
// arg0 and arg3+8 point into (8 MiB)", or "the allocations of arg2 (8 MiB) and arg4 (1 KiB)".
std::string memoryPhrase(const DeepNamed& n) {
  std::vector<const DeepMemory*> d = differingMemory(n);
  if (d.size() != 1) {
    std::vector<std::string> items;
    for (const DeepMemory* m : d)
      items.push_back(fmt::format("{} ({})", m->args, bytesText(m->bytes)));
    return "the allocations of " + joinAnd(items);
  }
  const DeepMemory& m = *d.front();
  if (m.args.find(',') == std::string::npos) {
    return fmt::format("{}'s allocation ({})", m.args, bytesText(m.bytes));
  }
  std::vector<std::string> words;
  for (size_t p = 0, q = 0; p <= m.args.size(); p = q + 1) {
    q = std::min(m.args.find(',', p), m.args.size());
    words.push_back(m.args.substr(p, q - p));
  }
  return fmt::format("the allocation {} point into ({})", joinAnd(words), bytesText(m.bytes));
}

std::string windowText(const DeepDiff& d) {
  return d.window.empty() ? "the deep window" : "the deep window " + d.window;
}

// "kernel `k` (event 7 in A / 7 in B, launch 3 of 6 in the deep window ops:1:3)"
std::string launchText(const DeepDiff& d, const DeepNamed& n, const std::string& a,
                       const std::string& b) {
  return fmt::format("kernel `{}` (event {} in {} / {} in {}, launch {} of {} in {})", n.kernel,
                     n.a, a, n.b, b, n.index + 1, d.launches_a, windowText(d));
}

std::string originText(const DeepDiff& d, const std::string& a, const std::string& b) {
  const DeepNamed& o = *d.origin;
  size_t n = o.memory.size();
  std::string v = fmt::format(
      "Divergence begins at {}: its memory before the launch matched in both runs ({} "
      "allocation{}), after it {} {} \xe2\x80\x94 same inputs, different outputs: the kernel is "
      "nondeterministic.",
      launchText(d, o, a, b), n, n == 1 ? "" : "s", memoryPhrase(o),
      differingMemory(o).size() == 1 ? "differs" : "differ");
  int64_t others = d.count(DeepStatus::kOrigin) - 1;
  if (others > 0) {
    const DeepNamed& next = d.other_origins.front();
    v += fmt::format(
        " {} later launch{} also turned identical memory into different memory "
        "(the next: kernel `{}`, event {} in {}).",
        others, others == 1 ? "" : "es", next.kernel, next.a, a);
  }
  return v;
}

std::string beforeWindowText(const DeepDiff& d, const std::string& a, const std::string& b) {
  const DeepNamed& p = *d.first_propagated;
  std::string v = fmt::format(
      "Divergence began before {}: its first launch, {}, already read memory that differed in {}. "
      "Start the window earlier.",
      windowText(d), launchText(d, p, a, b), memoryPhrase(p));
  if (d.origin) {
    v += fmt::format(
        " Inside the window, kernel `{}` (event {} in {}) also turned identical memory "
        "into different memory.",
        d.origin->kernel, d.origin->a, a);
  }
  return v;
}

std::string noOriginText(const DeepDiff& d, const std::string& a, const std::string& b) {
  if (d.first_propagated) {
    const DeepNamed& p = *d.first_propagated;
    return fmt::format(
        "No launch in {} turned identical memory into different memory, yet {} read memory that "
        "differed in {}: it diverged between launches (a copy, a host write, a collective) or "
        "outside the allocations the launches' arguments point into.",
        windowText(d), launchText(d, p, a, b), memoryPhrase(p));
  }
  if (d.compared == 0) {
    return fmt::format(
        "No deep launch of {} has a deep partner in {}: the launches in {} do not "
        "align between the runs.",
        a, b, windowText(d));
  }
  int64_t odd = d.count(DeepStatus::kNotComparable);
  if (odd > 0) {
    return fmt::format(
        "{} of {} launch pairs in {} could not be compared: their arguments or "
        "allocation sizes differ, as between batch sizes; the others saw identical "
        "memory before and after.",
        odd, d.compared, windowText(d));
  }
  return fmt::format(
      "All {} launches in {} saw identical memory before and after in both runs: "
      "divergence is outside the window.",
      d.compared, windowText(d));
}

}  // namespace

const char* deepStatusName(DeepStatus status) {
  switch (status) {
    case DeepStatus::kClean:
      return "clean";
    case DeepStatus::kOrigin:
      return "origin";
    case DeepStatus::kPropagated:
      return "propagated";
    case DeepStatus::kNotComparable:
      return "not comparable";
  }
  return "unknown";
}

DeepLaunch deepLaunchOf(const RankOps& ops, int64_t seq, const std::vector<db::Operand>& operands) {
  DeepLaunch out;
  out.seq = seq;
  for (const db::Operand& o : operands) {
    DeepTarget& t = targetFor(out.targets, o, ops);
    if (!o.has_digest) continue;
    if (o.role != db::OperandRole::kOutput) t.pre = o.digest;
    if (o.role != db::OperandRole::kInput) t.post = o.digest;
  }
  return out;
}

DeepVerdict classifyDeep(const DeepLaunch& a, const DeepLaunch& b) {
  if (!comparable(a, b)) return {DeepStatus::kNotComparable, {}};
  DeepVerdict v;
  for (size_t i = 0; i < a.targets.size(); ++i) {
    if (a.targets[i].pre != b.targets[i].pre) v.differing.push_back(i);
  }
  if (!v.differing.empty()) {
    v.status = DeepStatus::kPropagated;
    return v;
  }
  for (size_t i = 0; i < a.targets.size(); ++i) {
    if (a.targets[i].post != b.targets[i].post) v.differing.push_back(i);
  }
  v.status = v.differing.empty() ? DeepStatus::kClean : DeepStatus::kOrigin;
  return v;
}

std::vector<std::string> DeepNamed::differingArgs() const {
  std::vector<std::string> out;
  for (const DeepMemory& m : memory) {
    if (m.differs) out.push_back(m.args);
  }
  return out;
}

int64_t DeepDiff::count(DeepStatus s) const {
  auto it = counts.find(s);
  return it == counts.end() ? 0 : it->second;
}

int64_t deepLaunchCount(const RankOps& ops) { return ops.deep_launch_count; }

std::string deepVerdictText(const DeepDiff& d, const std::string& a, const std::string& b) {
  if (d.before_window && d.first_propagated) return beforeWindowText(d, a, b);
  if (d.origin) return originText(d, a, b);
  return noOriginText(d, a, b);
}

std::string bytesText(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  if (u == 0 || v == static_cast<double>(static_cast<int64_t>(v))) {
    return fmt::format("{} {}", static_cast<int64_t>(v), kUnits[u]);
  }
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

}  // namespace detrace::replay
