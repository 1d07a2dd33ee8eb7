// detrace export RUN --format perfetto -o OUT
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "commands.h"
#include "detrace/db/run.h"
#include "detrace/replay/perfetto_export.h"

namespace detrace::cli {

void addExportCommand(CLI::App& app, Runner& run) {
  struct Options {
    std::string path;
    std::string format = "perfetto";
    std::string output;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a run as Chrome-trace JSON for Perfetto UI (ui.perfetto.dev) or chrome://tracing.");
  cmd->add_option("RUN", opts->path, "Run directory (or one .dtrace file)")->required();
  cmd->add_option("--format", opts->format, "Output format (only: perfetto)")
      ->check(CLI::IsMember({"perfetto"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", opts->output, "Output file ('-' for standard output)")->required();
  cmd->footer(
      "One process track per rank, one thread track per CUDA stream; kernels are slices at their\n"
      "GPU times; collectives and GEMMs carry their arguments (op, sizes, NCCL algo/proto, cuBLASLt\n"
      "algorithm). Example: detrace export runA -o runA.json, then open runA.json in Perfetto UI.\n");
  cmd->callback([opts, &run] {
    run = [opts] {
      auto r = db::Run::open(opts->path);
      if (!r.isOk()) return reportError(r.status());
      bool to_stdout = opts->output == "-";
      std::FILE* out = to_stdout ? stdout : std::fopen(opts->output.c_str(), "w");
      if (out == nullptr) {
        return reportError(makeError(ErrorCode::kIo, "cannot write {}: {}", opts->output,
                                     std::strerror(errno)));
      }
      bool tty = isatty(STDERR_FILENO) != 0;
      auto progress = [tty](int64_t done, int64_t total) {
        if (tty) std::fprintf(stderr, "\rexporting: %lld / %lld events", static_cast<long long>(done),
                              static_cast<long long>(total));
      };
      Status st = replay::exportPerfetto(*r, out, progress);
      if (tty) std::fprintf(stderr, "\n");
      if (!to_stdout && std::fclose(out) != 0 && st.isOk()) {
        st = makeError(ErrorCode::kIo, "closing {} failed (disk full?)", opts->output);
      }
      if (!st.isOk()) return reportError(st);
      if (!to_stdout) std::fprintf(stderr, "wrote %s\n", opts->output.c_str());
      return kExitOk;
    };
  });
}

}  // namespace detrace::cli
