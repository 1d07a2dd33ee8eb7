// detrace export RUN --format perfetto -o OUT
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "detrace/db/run.h"
#include "detrace/replay/perfetto_export.h"

namespace detrace::cli {

namespace {

// Refuses an output that is one of the run's own files (a rank file, its WAL, the manifest): the
// export would destroy what it reads.
Status notARunFile(const db::Run& run, const std::string& output) {
  std::error_code ec;
  if (!std::filesystem::exists(output, ec)) return Status::ok();
  std::vector<std::string> own;
  for (const db::RankFile& rf : run.ranks()) own.push_back(rf.path);
  for (const std::string& f : run.idleFiles()) own.push_back(f);
  const size_t traces = own.size();
  for (size_t i = 0; i < traces; ++i) {
    own.push_back(own[i] + "-wal");
    own.push_back(own[i] + "-shm");
  }
  // The manifest of the directory each trace is in: a run opened by one of its .dtrace files too.
  for (size_t i = 0; i < traces; ++i) {
    own.push_back((std::filesystem::path(own[i]).parent_path() / "manifest.json").string());
  }
  for (const std::string& f : own) {
    if (std::filesystem::equivalent(output, f, ec) && !ec) {
      return makeError(ErrorCode::kInvalidArgument,
                       "{} is one of the run's own files; choose another output, e.g. -o run.json",
                       output);
    }
  }
  return Status::ok();
}

}  // namespace

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
      for (const std::string& w : r->warnings()) std::fprintf(stderr, "detrace: warning: %s\n", w.c_str());
      bool to_stdout = opts->output == "-";
      if (!to_stdout) {
        if (Status own = notARunFile(*r, opts->output); !own.isOk()) return reportError(own);
      }
      // A file is written beside the output and renamed over it once whole: a failed export (a
      // full disk) leaves no partial file, and an older export stays as it was. Anything else (a
      // pipe, a device) is written in place.
      std::error_code ec;
      const auto kind = std::filesystem::status(opts->output, ec).type();
      const bool in_place = !to_stdout && kind != std::filesystem::file_type::not_found &&
                            kind != std::filesystem::file_type::regular;
      const std::string target = in_place ? opts->output : opts->output + ".partial";
      std::FILE* out = to_stdout ? stdout : std::fopen(target.c_str(), "w");
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
      if (!to_stdout && !in_place) {
        if (st.isOk()) std::filesystem::rename(target, opts->output, ec);
        if (st.isOk() && ec) st = makeError(ErrorCode::kIo, "cannot write {}: {}", opts->output, ec.message());
        if (!st.isOk()) std::filesystem::remove(target, ec);
      }
      if (!st.isOk()) return reportError(st);
      if (!to_stdout) std::fprintf(stderr, "wrote %s\n", opts->output.c_str());
      return kExitOk;
    };
  });
}

}  // namespace detrace::cli
