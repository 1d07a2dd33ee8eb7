#include "detrace/replay/diff_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace detrace::replay {
namespace {

const RankDiff* originRank(const RunDiff& d) {
  if (!d.origin_rank) return nullptr;
  for (const RankDiff& r : d.ranks) {
    if (r.rank == *d.origin_rank) return &r;
  }
  return nullptr;
}

std::string seqText(int64_t seq) { return seq >= 0 ? std::to_string(seq) : "-"; }

// "step 3 › layer 5"
std::string joinPosition(const std::vector<std::string>& position) {
  std::string out;
  for (const std::string& p : position) out += (out.empty() ? "" : " \xe2\x80\xba ") + p;
  return out;
}

// The position line: the enclosing NVTX ranges with the landmark, or the landmark alone.
std::string positionText(const RankDiff& r) {
  if (r.position.empty()) {
    return fmt::format("{} (the trace has no NVTX ranges)", r.landmark);
  }
  return fmt::format("{} ({})", joinPosition(r.position), r.landmark);
}

// The first divergence is the launch a deep window named as the origin.
bool firstIsDeepOrigin(const RankDiff& r) {
  return r.deep && r.deep->origin && !r.deep->before_window && r.deep->origin->a == r.first->a;
}

// The command that would confirm the verdict.
std::string nextStep(const RankDiff& r, const DiffLabels& l) {
  if (r.ends_early != 0) {
    return fmt::format("record run {} again to its end ({} says why it stopped), then diff again",
                       r.ends_early, fmt::format("detrace info {}", r.ends_early == 'A' ? l.a : l.b));
  }
  if (r.first->status == PairStatus::kNondeterministic && firstIsDeepOrigin(r)) {
    return fmt::format("look for atomics or an unordered reduction in this kernel; to confirm, "
                       "record a third run with the same --deep window and diff it against {}: "
                       "the same launch should be the origin again",
                       l.a);
  }
  switch (r.first->status) {
    case PairStatus::kNondeterministic:
      return fmt::format("re-run this op on its recorded inputs to confirm: detrace replay {} "
                         "--rank {} --event {} --repeat 20 (needs --capture full at record time)",
                         l.a, r.rank, r.first->a);
    case PairStatus::kKernelSelection:
      return fmt::format("compare both choices on the same inputs: detrace replay {} --rank {} "
                         "--event {} --pair {} --event-b {}",
                         l.a, r.rank, r.first->a, l.b, r.first->b);
    case PairStatus::kBatchVariant:
      return fmt::format("check which implementation keeps the rows invariant: detrace replay {} "
                         "--rank {} --event {} --pair {} --event-b {}",
                         l.a, r.rank, r.first->a, l.b, r.first->b);
    case PairStatus::kPropagated:
      if (r.entered_after) {
        return fmt::format("the kernels between events {} and {} on rank {} are the suspects: see "
                           "them with detrace export {} -o a.json (Perfetto UI)",
                           *r.entered_after, r.first->a, r.rank, l.a);
      }
      return "follow it back to the rank where it began (per rank, below)";
    default:
      return "look at the events just before it: a schedule difference usually follows a "
             "different code path or batch composition";
  }
}

// "arg2 (8 MiB), arg0,arg3+8 (256 B)": the memory of `n` that differs (or not).
std::string memoryList(const DeepNamed& n, bool differs) {
  std::string out;
  for (const DeepMemory& m : n.memory) {
    if (m.differs != differs) continue;
    out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", m.args, bytesText(m.bytes));
  }
  return out.empty() ? "none" : out;
}

// "1 origin, 2 propagated, 3 clean"
std::string deepCounts(const DeepDiff& d) {
  std::string out;
  for (auto [status, n] : d.counts) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", n, deepStatusName(status));
  }
  if (d.unpaired > 0) out += fmt::format("{}{} without a partner", out.empty() ? "" : ", ", d.unpaired);
  return out.empty() ? "nothing to compare" : out;
}

std::string namedPosition(const DeepNamed& n) {
  if (n.position.empty()) return n.landmark;
  return fmt::format("{} ({})", joinPosition(n.position), n.landmark);
}

std::string deepOrigins(const DeepDiff& d) {
  std::string out;
  for (const DeepNamed& o : d.other_origins) {
    out += fmt::format("{}kernel {} (event {} in A / {} in B)", out.empty() ? "" : "; ", o.kernel, o.a, o.b);
  }
  int64_t more = d.count(DeepStatus::kOrigin) - 1 - static_cast<int64_t>(d.other_origins.size());
  if (more > 0) out += fmt::format(" and {} more", more);
  return out.empty() ? "none" : out;
}

// "; deep origin at A 7 / B 7": what a rank's deep window found, for the per-rank lines.
std::string deepRankNote(const RankDiff& r) {
  if (!r.deep) return "";
  const DeepDiff& d = *r.deep;
  if (d.before_window) return "; deep: began before the window";
  if (d.origin) return fmt::format("; deep origin at A {} / B {} ({})", d.origin->a, d.origin->b, d.origin->kernel);
  return "; deep: no origin in the window";
}

// The deep window block of the report, for the rank where divergence began.
std::string formatDeep(const RankDiff& r) {
  const DeepDiff& d = *r.deep;
  std::string out = fmt::format("deep window        rank {}, {}: {} launch(es) in A, {} in B; {}\n", r.rank,
                                d.window.empty() ? "window unknown" : d.window, d.launches_a,
                                d.launches_b, deepCounts(d));
  out += fmt::format("  verdict          {}\n", deepVerdictText(d));
  if (const auto& o = d.origin) {
    out += fmt::format("  origin           kernel {}, event {} in A / {} in B, launch {} of {}\n", o->kernel,
                       o->a, o->b, o->index + 1, d.launches_a);
    out += fmt::format("  position         {}\n", namedPosition(*o));
    out += fmt::format("  differs after    {}\n", memoryList(*o, true));
    out += fmt::format("  same after       {}\n", memoryList(*o, false));
    out += fmt::format("  other origins    {}\n", deepOrigins(d));
  }
  if (const auto& p = d.first_propagated) {
    out += fmt::format("  first reader     kernel {}, event {} in A / {} in B, launch {} of {}, read "
                       "diverged {}\n",
                       p->kernel, p->a, p->b, p->index + 1, d.launches_a, memoryList(*p, true));
  }
  return out + "\n";
}

nlohmann::json namedJson(const DeepNamed& n) {
  nlohmann::json memory = nlohmann::json::array();
  for (const DeepMemory& m : n.memory) {
    memory.push_back({{"args", m.args}, {"bytes", m.bytes}, {"address_a", m.address_a},
                      {"address_b", m.address_b}, {"differs", m.differs}});
  }
  return {{"seq_a", n.a},           {"seq_b", n.b},         {"window_index", n.index},
          {"status", deepStatusName(n.status)}, {"kernel", n.kernel}, {"memory", memory},
          {"args", n.differingArgs()}, {"position", n.position}, {"landmark", n.landmark}};
}

// "rank 3", "ranks 0, 2", "ranks 0-7"
std::string ranksText(const std::vector<int32_t>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  bool contiguous =
      ranks.size() > 2 && ranks.back() - ranks.front() + 1 == static_cast<int32_t>(ranks.size());
  if (contiguous) return fmt::format("ranks {}-{}", ranks.front(), ranks.back());
  std::string out;
  for (int32_t r : ranks) out += fmt::format("{}{}", out.empty() ? "" : ", ", r);
  return "ranks " + out;
}

// "8192 (16 KiB)"
std::string elementsText(int64_t count, db::DType dtype) {
  int size = db::dtypeSize(dtype);
  return size > 0 ? fmt::format("{} ({})", count, bytesText(count * size)) : std::to_string(count);
}

// "AllReduce bf16 1024 (2 KiB) -> 65536 (128 KiB)"
std::string collectiveSizeText(const CollectiveChoiceChange& c) {
  std::string size = elementsText(c.count_a, c.dtype);
  if (c.count_b != c.count_a) size += " -> " + elementsText(c.count_b, c.dtype);
  return fmt::format("{} {} {}", db::collOpName(c.op), db::dtypeName(c.dtype), size);
}

std::string collectiveChoiceText(const std::string& algo, const std::string& proto,
                                 int32_t channels) {
  return channels >= 0 ? fmt::format("{}/{}/{} ch", algo, proto, channels)
                       : fmt::format("{}/{}/? ch", algo, proto);
}

// What became of the outputs of a row's calls: "rows unchanged", "rows changed in 3 of 24 calls".
std::string outcomeText(const CollectiveChoiceChange& c, bool batch) {
  const char* what = batch ? "rows" : "outputs";
  if (c.unchanged == c.calls) return fmt::format("{} unchanged", what);
  std::string out = c.changed > 0
                        ? fmt::format("{} changed in {} of {} call(s)", what, c.changed, c.calls)
                        : fmt::format("{} unknown", what);
  std::string why;
  auto add = [&](int64_t n, const char* text) {
    if (n > 0) why += fmt::format("{}{} in {} call(s)", why.empty() ? "" : "; ", text, n);
  };
  add(c.unchanged, "unchanged");
  add(c.inputs_differed, "inputs already differed");
  add(c.unknown, batch ? "no row digests" : "no fingerprints");
  return why.empty() ? out : fmt::format("{} ({})", out, why);
}

// The NCCL choice table of formatDiff.
std::string formatCollectiveChoices(const RunDiff& d) {
  std::string out =
      fmt::format("\nNCCL choice changes (A -> B), and whether {} changed\n",
                  d.batch_mode ? "the request's rows of their outputs" : "their outputs");
  for (const CollectiveChoiceChange& c : d.collective_choice_changes) {
    out += fmt::format("  {:>6}x  {}, {}\n          {} -> {}: {}\n", c.calls, collectiveSizeText(c),
                       ranksText(c.ranks), collectiveChoiceText(c.algo_a, c.proto_a, c.channels_a),
                       collectiveChoiceText(c.algo_b, c.proto_b, c.channels_b),
                       outcomeText(c, d.batch_mode));
  }
  return out;
}

// One line per rank with reordered events.
std::string formatReordered(const RunDiff& d) {
  std::string out;
  for (const RankDiff& r : d.ranks) {
    if (r.reordered() == 0) continue;
    out += fmt::format(
        "{} event(s) ran in another order relative to the rest on rank {} (another "
        "thread's or stream's work, e.g. NCCL's setup copies); their contents match\n",
        r.reordered(), r.rank);
  }
  return out;
}

nlohmann::json collectiveChoicesJson(const RunDiff& d) {
  nlohmann::json out = nlohmann::json::array();
  for (const CollectiveChoiceChange& c : d.collective_choice_changes) {
    out.push_back({{"op", db::collOpName(c.op)},
                   {"dtype", db::dtypeName(c.dtype)},
                   {"count_a", c.count_a},
                   {"count_b", c.count_b},
                   {"algo_a", c.algo_a},
                   {"proto_a", c.proto_a},
                   {"channels_a", c.channels_a},
                   {"algo_b", c.algo_b},
                   {"proto_b", c.proto_b},
                   {"channels_b", c.channels_b},
                   {"calls", c.calls},
                   {"rows", c.rows()},
                   {"calls_unchanged", c.unchanged},
                   {"calls_changed", c.changed},
                   {"calls_inputs_differed", c.inputs_differed},
                   {"calls_unknown", c.unknown},
                   {"ranks", c.ranks}});
  }
  return out;
}

}  // namespace

nlohmann::json deepDiffJson(const DeepDiff& d) {
  nlohmann::json counts = nlohmann::json::object();
  for (auto [status, n] : d.counts) counts[deepStatusName(status)] = n;
  nlohmann::json others = nlohmann::json::array();
  for (const DeepNamed& o : d.other_origins) others.push_back(namedJson(o));
  nlohmann::json j = {{"window", d.window},     {"launches_a", d.launches_a},
                      {"launches_b", d.launches_b}, {"compared", d.compared},
                      {"unpaired", d.unpaired}, {"counts", counts},
                      {"origins", d.count(DeepStatus::kOrigin)},
                      {"before_window", d.before_window}, {"other_origins", others},
                      {"verdict", deepVerdictText(d)}};
  j["origin"] = d.origin ? namedJson(*d.origin) : nlohmann::json(nullptr);
  j["first_propagated"] = d.first_propagated ? namedJson(*d.first_propagated) : nlohmann::json(nullptr);
  return j;
}

std::string nextStepText(const RankDiff& r, const DiffLabels& l) {
  return r.first ? nextStep(r, l) : "";
}

std::string formatDiff(const RunDiff& d, const DiffLabels& l) {
  std::string out;
  const RankDiff* origin = originRank(d);
  if (origin == nullptr && !d.complete()) {
    out += fmt::format("INCOMPLETE: {} and {} match on the {} rank(s) compared, but rank(s) {} are not in "
                       "both runs (see the warnings): the runs are not shown identical.\n",
                       l.a, l.b, d.ranks.size(), fmt::join(d.uncompared_ranks, ", "));
    out += formatReordered(d);
  } else if (origin == nullptr) {
    out += fmt::format("IDENTICAL: {} and {} match on every compared rank ({} rank(s)).\n", l.a,
                       l.b, d.ranks.size());
    out += formatReordered(d);
  } else {
    const PairDiff& f = *origin->first;
    out += fmt::format("DIVERGENT: {} and {} part on rank {}.\n", l.a, l.b, origin->rank);
    if (d.batch_mode) {
      out += "(batch-size mode: the runs' token counts differ; the request's rows are compared)\n";
    }
    out += "\n";
    if (origin->deep) out += formatDeep(*origin);
    out += fmt::format("first divergence   rank {}, event {} in A / {} in B, after {} collective(s)\n",
                       origin->rank, seqText(f.a), seqText(f.b), f.collectives_before);
    out += fmt::format("  position         {}\n", positionText(*origin));
    if (!origin->position_b.empty()) {
      out += fmt::format("  position in B    {}\n", joinPosition(origin->position_b));
    }
    out += fmt::format("  op in A          {}\n", origin->first_a);
    out += fmt::format("  op in B          {}\n", origin->first_b);
    out += fmt::format("  why              {}\n", origin->why);
    out += fmt::format("  after it         {} more differing event(s) on this rank\n",
                       origin->differingEvents() - 1);
    out += fmt::format("  next             {}\n", nextStep(*origin, l));
    if (std::string reordered = formatReordered(d); !reordered.empty()) out += "\n" + reordered;
  }
  out += "\nper rank\n";
  for (const RankDiff& r : d.ranks) {
    std::string reordered = r.reordered() > 0 ? fmt::format("; {} reordered", r.reordered()) : "";
    if (!r.first) {
      out += fmt::format("  rank {:<3} identical ({} events{})\n", r.rank, r.events_a, reordered);
      continue;
    }
    out += fmt::format(
        "  rank {:<3} first at A {} / B {} ({}), after {} collective(s); {} differing{}{}\n",
        r.rank, seqText(r.first->a), seqText(r.first->b), pairStatusName(r.first->status),
        r.first->collectives_before, r.differingEvents(), reordered, deepRankNote(r));
  }
  if (!d.selection_changes.empty()) {
    out += "\nkernel selection changes (same op and shape, A -> B)\n";
    for (const SelectionChange& c : d.selection_changes) {
      out += fmt::format("  {:>6}x  {:<10} {}\n          {:<10} -> {}\n", c.count,
                         db::eventKindName(c.kind), shortKernelName(c.a), "", shortKernelName(c.b));
    }
  }
  if (!d.collective_choice_changes.empty()) out += formatCollectiveChoices(d);
  for (const std::string& w : d.warnings) out += fmt::format("\nwarning: {}", w);
  if (!d.warnings.empty()) out += "\n";
  return out;
}

const char* diffVerdictName(const RunDiff& d) {
  if (!d.identical()) return "divergent";
  return d.complete() ? "identical" : "incomplete";
}

nlohmann::json diffJson(const RunDiff& d, const DiffLabels& l) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankDiff& r : d.ranks) {
    nlohmann::json counts = nlohmann::json::object();
    for (auto [status, n] : r.counts) counts[pairStatusName(status)] = n;
    nlohmann::json j = {{"rank", r.rank},
                        {"events_a", r.events_a},
                        {"events_b", r.events_b},
                        {"counts", counts},
                        {"differing", r.differingEvents()},
                        {"reordered", r.reordered()},
                        {"exact_alignment", r.exact_alignment}};
    if (r.first) {
      j["first"] = {{"seq_a", r.first->a},
                    {"seq_b", r.first->b},
                    {"status", pairStatusName(r.first->status)},
                    {"collectives_before", r.first->collectives_before},
                    {"op_a", r.first_a},
                    {"op_b", r.first_b},
                    {"why", r.why}};
      if (r.entered_after) j["first"]["entered_after"] = *r.entered_after;
      j["first"]["position"] = r.position;
      j["first"]["landmark"] = r.landmark;
      if (!r.position_b.empty()) j["first"]["position_b"] = r.position_b;
      if (r.first->moved()) j["first"]["moved"] = true;
      if (r.ends_early != 0) j["first"]["ends_early"] = std::string(1, r.ends_early);
    }
    if (r.deep) j["deep"] = deepDiffJson(*r.deep);
    ranks.push_back(j);
  }
  nlohmann::json changes = nlohmann::json::array();
  for (const SelectionChange& c : d.selection_changes) {
    changes.push_back({{"kind", db::eventKindName(c.kind)}, {"a", c.a}, {"b", c.b}, {"count", c.count}});
  }
  nlohmann::json j = {{"run_a", l.a},
                      {"run_b", l.b},
                      {"batch_mode", d.batch_mode},
                      {"verdict", diffVerdictName(d)},
                      {"identical", d.identical() && d.complete()},
                      {"complete", d.complete()},
                      {"uncompared_ranks", d.uncompared_ranks},
                      {"ranks", ranks},
                      {"selection_changes", changes},
                      {"collective_choice_changes", collectiveChoicesJson(d)},
                      {"warnings", d.warnings}};
  j["origin_rank"] = d.origin_rank ? nlohmann::json(*d.origin_rank) : nlohmann::json(nullptr);
  return j;
}

}  // namespace detrace::replay
