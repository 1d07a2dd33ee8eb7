// The text reports of `detrace replay`: one table per replayed op (one row per implementation)
// and, for a batch-size pair, the table of which implementations keep the request's rows
// bit-identical across the two shapes.
#include <fmt/format.h>

#include "detrace/replay/replay.h"

namespace detrace::replay {
namespace {

std::string num(double v) {
  if (v == 0.0) return "0";
  return fmt::format("{:.3g}", v);
}

std::string ulp(const Distance& d) {
  if (d.nan_mismatch > 0) return "NaN";
  return std::to_string(d.max_ulp);
}

std::string bitExact(const ImplResult& r) {
  if (!r.matches_recorded) return "-";
  const int m = *r.matches_recorded;
  const char* word = m == r.runs ? "yes" : m == 0 ? "no" : "some";
  return fmt::format("{} {}/{}", word, m, r.runs);
}

std::string distanceCells(const std::optional<Distance>& d) {
  if (!d) return fmt::format("{:>5} {:>9} {:>9}", "-", "-", "-");
  return fmt::format("{:>5} {:>9} {:>9}", ulp(*d), num(d->max_abs), num(d->max_rel));
}

std::string nameCell(const std::string& name, bool control) {
  return control ? name + " *" : name;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string implTable(const ReplayResult& r) {
  std::string s = fmt::format("{:<20} {:<6} {:>4} {:>8}  {:<9} {:-^25}  {:-^25}\n", "", "", "",
                              "", "", " vs recorded ", " vs fp64 ");
  s += fmt::format("{:<20} {:<6} {:>4} {:>8}  {:<9} {:>5} {:>9} {:>9}  {:>5} {:>9} {:>9}\n",
                   "implementation", "device", "runs", "distinct", "bit-exact", "ulp", "abs", "rel",
                   "ulp", "abs", "rel");
  for (const auto& i : r.impls) {
    std::string head = fmt::format("{:<20} {:<6}", nameCell(i.name, i.control), i.gpu ? "gpu" : "cpu");
    if (!i.skipped.empty()) {
      s += fmt::format("{} skipped: {}\n", head, i.skipped);
    } else if (!i.error.empty()) {
      s += fmt::format("{} failed after {} run(s): {}\n", head, i.runs, i.error);
    } else {
      s += fmt::format("{} {:>4} {:>8}  {:<9} {}  {}\n", head, i.runs, i.distinct, bitExact(i),
                       distanceCells(i.to_recorded), distanceCells(i.to_reference));
    }
  }
  return s;
}

std::string findings(const ReplayResult& r) {
  std::vector<std::string> nondet, ran;
  bool any_control = false;
  for (const auto& i : r.impls) {
    if (!i.ran()) continue;
    ran.push_back(i.name);
    if (i.distinct > 1) nondet.push_back(nameCell(i.name, i.control));
    any_control |= i.control;
  }
  std::string s;
  const bool comparable = std::any_of(r.impls.begin(), r.impls.end(),
                                      [](const ImplResult& i) { return i.matches_recorded.has_value(); });
  const auto repro = r.reproducing();
  if (r.recorded.empty()) {
    s += "recorded output   neither captured nor fingerprinted: nothing to compare bit for bit\n";
  } else if (!comparable) {
    s += "recorded output   no implementation ran\n";
  } else if (repro.empty()) {
    s += "reproduced by     none of the implementations that ran\n";
  } else {
    s += fmt::format("reproduced by     {}\n", joined(repro));
  }
  s += fmt::format("nondeterministic  {}\n", nondet.empty() ? "none (each implementation gave one "
                                                              "output over its runs)"
                                                            : joined(nondet));
  if (any_control) s += "* planted defect (control): expected to misbehave\n";
  return s;
}

std::string rowsText(const PairResult& p) {
  std::string s;
  const size_t shown = std::min<size_t>(p.rows.size(), 8);
  for (size_t k = 0; k < shown; ++k) {
    s += fmt::format("{}{}->{}", k ? ", " : "", p.rows[k].first, p.rows[k].second);
  }
  if (shown < p.rows.size()) s += fmt::format(", ... ({} more)", p.rows.size() - shown);
  return s;
}

}  // namespace

std::string formatReplay(const ReplayResult& r) {
  std::string s = fmt::format("replay            {} rank {} event {}\n", r.run, r.rank, r.seq);
  s += fmt::format("op                {}\n", r.op);
  s += fmt::format("output            {} x {} {}{}\n", r.output.rows, r.output.cols,
                   db::dtypeName(r.output.dtype),
                   r.kind == "gemm" ? fmt::format(" ({} token row(s))", r.tokens) : "");
  s += fmt::format("recorded output   {}\n", r.recorded.empty() ? "none" : r.recorded);
  for (const auto& n : r.notes) s += fmt::format("note              {}\n", n);
  s += "\n" + implTable(r) + "\n" + findings(r);
  return s;
}

std::string formatPair(const PairResult& p) {
  std::string s = "=== A ===\n" + formatReplay(p.a) + "\n=== B ===\n" + formatReplay(p.b);
  s += "\n=== batch-size pair ===\n";
  s += fmt::format("A                 {} event {}: {} row(s)\n", p.a.run, p.a.seq, p.a.output.rows);
  s += fmt::format("B                 {} event {}: {} row(s)\n", p.b.run, p.b.seq, p.b.output.rows);
  s += fmt::format("request rows      {} (A row -> B row: {})\n", p.rows.size(), rowsText(p));
  if (p.recorded_rows_equal) {
    s += fmt::format("recorded outputs  {} of {} request row(s) bit-identical between A and B\n",
                     *p.recorded_rows_equal, p.rows.size());
  } else {
    s += "recorded outputs  not comparable (neither captured nor fingerprinted per row)\n";
  }
  s += fmt::format("\n{:<20} {:<6} {:>12}  {}\n", "implementation", "device", "rows equal", "verdict");
  std::vector<std::string> invariant, variant;
  for (const auto& i : p.impls) {
    std::string head = fmt::format("{:<20} {:<6}", nameCell(i.name, i.control), i.gpu ? "gpu" : "cpu");
    if (!i.skipped.empty()) {
      s += fmt::format("{} skipped: {}\n", head, i.skipped);
      continue;
    }
    const bool inv = i.invariant();
    (inv ? invariant : variant).push_back(i.name == "recorded" ? "recorded (the recorded kernel)"
                                                               : nameCell(i.name, i.control));
    s += fmt::format("{} {:>12}  {}\n", head, fmt::format("{} of {}", i.rows_equal, i.rows),
                     inv ? "batch-invariant" : "batch-variant");
  }
  s += "\n";
  s += fmt::format("batch-invariant   {}\n", invariant.empty() ? "none that ran" : joined(invariant));
  s += fmt::format("batch-variant     {}\n", variant.empty() ? "none that ran" : joined(variant));
  return s;
}

}  // namespace detrace::replay
