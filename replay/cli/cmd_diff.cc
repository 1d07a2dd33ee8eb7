// detrace diff RUN_A RUN_B [RUN_C ...] [--rank R] [--batch auto|on|off] [--json]
#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "detrace/db/run.h"
#include "detrace/replay/diff.h"
#include "detrace/replay/diff_report.h"

namespace detrace::cli {
namespace {

static_assert(replay::kReorderWindow == 4096, "the --help footer and README.md name the window");

struct DiffCliOptions {
  std::vector<std::string> runs;
  int rank = -1;
  bool json = false;
  std::string batch = "auto";
};

int diffTwo(const DiffCliOptions& o, const std::vector<db::Run>& runs,
            const replay::DiffOptions& options) {
  auto diff = replay::diffRuns(runs[0], runs[1], options);
  if (!diff.isOk()) return reportError(diff.status());
  replay::DiffLabels labels{o.runs[0], o.runs[1]};
  // No divergence on the ranks compared, but not every rank was: neither answer is shown (2).
  const int rc = !diff->identical() ? kExitDivergent : diff->complete() ? kExitOk : kExitError;
  if (o.json) {
    nlohmann::json j = replay::diffJson(*diff, labels);
    j["exit_status"] = rc;
    printJson(j);
  } else {
    std::printf("%s", replay::formatDiff(*diff, labels).c_str());
  }
  return rc;
}

int diffMany(const DiffCliOptions& o, const std::vector<db::Run>& runs,
             const replay::DiffOptions& options) {
  auto groups = replay::groupRuns(runs, options);
  if (!groups.isOk()) return reportError(groups.status());
  const auto& classes = groups->classes;
  // 0: one class; 1: every other class diverges; 2: a class differs only by ranks not compared.
  int rc = kExitOk;
  for (const replay::RunDiff& d : groups->explanations) {
    rc = std::max(rc, d.identical() ? kExitError : kExitDivergent);
  }
  if (o.json) {
    nlohmann::json run_warnings = nlohmann::json::object();
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!runs[i].warnings().empty()) run_warnings[o.runs[i]] = runs[i].warnings();
    }
    nlohmann::json j = {{"runs", o.runs}, {"classes", nlohmann::json::array()},
                        {"explanations", nlohmann::json::array()}, {"run_warnings", run_warnings},
                        {"exit_status", rc}};
    for (const auto& c : classes) {
      nlohmann::json members = nlohmann::json::array();
      for (size_t i : c) members.push_back(o.runs[i]);
      j["classes"].push_back(members);
    }
    for (size_t k = 0; k < groups->explanations.size(); ++k) {
      j["explanations"].push_back(replay::diffJson(
          groups->explanations[k], {o.runs[classes[0].front()], o.runs[classes[k + 1].front()]}));
    }
    printJson(j);
    return rc;
  }
  std::printf("%zu distinct behaviour(s) over %zu runs\n", classes.size(), runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {  // what opening each run found, once
    for (const std::string& w : runs[i].warnings()) std::printf("warning: %s: %s\n", o.runs[i].c_str(), w.c_str());
  }
  for (size_t k = 0; k < classes.size(); ++k) {
    std::string members;
    for (size_t i : classes[k]) members += (members.empty() ? "" : ", ") + o.runs[i];
    std::printf("  class %zu (%zu run(s)): %s\n", k + 1, classes[k].size(), members.c_str());
  }
  for (size_t k = 0; k < groups->explanations.size(); ++k) {
    std::printf("\n--- class 1 vs class %zu ---\n%s", k + 2,
                replay::formatDiff(groups->explanations[k],
                                   {o.runs[classes[0].front()], o.runs[classes[k + 1].front()]})
                    .c_str());
  }
  return rc;
}

}  // namespace

void addDiffCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<DiffCliOptions>();
  CLI::App* cmd = app.add_subcommand("diff", "Find where runs stop being bit-identical, and why.");
  cmd->add_option("RUNS", opts->runs, "Two or more run directories (or .dtrace files)")
      ->required()
      ->expected(2, -1);
  cmd->add_option("--rank", opts->rank, "Compare only this rank")->check(nonNegativeInteger())->type_name("R");
  cmd->add_option("--batch", opts->batch,
                  "Batch-size mode (bs=1 vs bs=N): compare the request's rows by per-row "
                  "fingerprints. auto: on when the runs' GEMMs differ only in their token dimension")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print the verdict as JSON");
  cmd->footer(
      "Each rank's events are aligned (library ops first, then the kernels between them) and every\n"
      "aligned pair is classified: kernel selection changed (same op and shape, different kernel,\n"
      "cuBLASLt algorithm or NCCL algorithm/protocol/channels), nondeterministic (same input\n"
      "fingerprints, different outputs), propagated (inputs already differed, on this rank or, for\n"
      "a collective, on another), batch-variant (batch mode: the request's input rows match, its\n"
      "output rows do not), or a schedule/shape difference (present in one run only). An op\n"
      "present in one run only that has a partner of the same kind and shape left over in the\n"
      "other, at most 4096 positions away (another thread's or stream's work, e.g. NCCL's setup\n"
      "copies), is classified with it: reordered if their contents match, which is not a\n"
      "divergence. The report names the first divergence in causal order across ranks and the\n"
      "command to confirm it, says how many events were reordered, and lists the collectives\n"
      "whose NCCL algorithm/protocol/channels changed (per op, dtype and size in A and B, with\n"
      "calls) and whether their outputs, in batch mode the request's rows, stayed the same.\n"
      "When both runs were recorded with --deep, their launches in the window are compared by the\n"
      "digests of the memory they reach: the first launch whose memory matched before it and\n"
      "differs after it is named as the origin (which argument's allocation changed); launches\n"
      "that read diverged memory are propagated.\n"
      "With more than two runs, the runs are grouped into bit-identical classes first.\n"
      "A rank of either run's world that is not in both (a file missing, or left out as holding\n"
      "nothing recorded) makes the verdict INCOMPLETE, never IDENTICAL.\n\n"
      "Examples:\n"
      "  detrace diff runA runB                 run-to-run\n"
      "  detrace diff bs1 bs64                  batch-size mode is detected from the GEMM shapes\n"
      "  detrace diff run1 run2 run3 run4       how many distinct behaviours, and where they part\n\n"
      "Exit status: 0 identical, 1 divergent, 2 error or incomplete.\n");
  cmd->callback([opts, &run] {
    run = [opts] {
      std::vector<db::Run> runs;
      for (const std::string& path : opts->runs) {
        auto r = db::Run::open(path);
        if (!r.isOk()) return reportError(r.status());
        runs.push_back(std::move(*r));
      }
      replay::DiffOptions options;
      options.keep_differing = false;  // the report prints counts: memory stays bounded
      if (opts->rank >= 0) options.rank = opts->rank;
      if (opts->batch != "auto") options.batch = opts->batch == "on";
      return runs.size() == 2 ? diffTwo(*opts, runs, options) : diffMany(*opts, runs, options);
    };
  });
}

}  // namespace detrace::cli
