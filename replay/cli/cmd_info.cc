// detrace info RUN [--json]
#include <cstdio>

#include "commands.h"
#include "detrace/db/run.h"
#include "detrace/replay/summary.h"

namespace detrace::cli {

void addInfoCommand(CLI::App& app, Runner& run) {
  struct Options {
    std::string path;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "info",
      "Summarise a run: ranks, GPUs, event counts by kind, time span, versions, recorder drops.");
  cmd->add_option("RUN", opts->path, "Run directory (or one .dtrace file)")->required();
  cmd->add_flag("--json", opts->json, "Print JSON instead of a table");
  cmd->footer(
      "Warnings follow the table: ranks the world size promises but no file holds, files that were\n"
      "not finished (the process was killed, is still running, or stopped recording on a write\n"
      "error such as a full disk: such a file holds everything committed before), drops, and NCCL\n"
      "calls recorded without what NCCL chose (NCCL loaded no detrace profiler plugin: NCCL before\n"
      "2.28, or NCCL_PROFILER_PLUGIN set) or without a communicator id, and communicators the\n"
      "program revoked (ncclCommRevoke: outputs fingerprinted after NCCL stopped a call).\n\n"
      "Exit status: 0 on success, 2 if the run cannot be read (the message says why).\n");
  cmd->callback([opts, &run] {
    run = [opts] {
      auto r = db::Run::open(opts->path);
      if (!r.isOk()) return reportError(r.status());
      auto summary = replay::summarize(*r);
      if (!summary.isOk()) return reportError(summary.status());
      if (opts->json) {
        printJson(replay::summaryJson(*summary));
      } else {
        std::printf("%s", replay::formatSummary(*summary).c_str());
      }
      return kExitOk;
    };
  });
}

}  // namespace detrace::cli
