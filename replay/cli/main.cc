// detrace: record-and-replay debugger for bitwise reproducibility of GPU inference.
#include <new>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "detrace/base/version.h"

namespace detrace::cli {

namespace {
std::vector<std::string> g_raw_args;
bool g_json_printed = false;

// Whether the command line asks for JSON: --json before any `--` (after it, the recorded
// command's own arguments).
bool jsonWanted() {
  for (const std::string& a : g_raw_args) {
    if (a == "--") return false;
    if (a == "--json") return true;
  }
  return false;
}
}  // namespace

const std::vector<std::string>& rawArgs() { return g_raw_args; }

void printJson(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  g_json_printed = true;
}

int reportError(const Status& status) {
  std::fprintf(stderr, "detrace: error: %s\n", status.message().c_str());
  // A script that asked for JSON reads an object on stdout, not nothing, when the command fails.
  if (jsonWanted() && !g_json_printed) {
    printJson({{"error", {{"code", errorCodeName(status.code())}, {"message", status.message()}}},
               {"exit_status", kExitError}});
  }
  return kExitError;
}

namespace {

// What the command printed must have reached its destination: `detrace info RUN > /dev/full`, or
// a closed stdout, is an error a script has to see, not a success with nothing written.
// One sentence for a command line CLI11 refused, with the help to read: a misspelled command is
// named as such (CLI11 says only that a subcommand is required).
std::string parseErrorText(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) return fmt::format("no command '{}'; the commands are {} (see detrace --help)", argv[1], names);
  }
  const std::string sub = argc > 1 && argv[1][0] != '-' ? std::string(argv[1]) + " " : "";
  return fmt::format("{} (see detrace {}--help)", e.what(), sub);
}

int outputWritten(int rc) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  const int e = errno;
  std::fprintf(stderr, "detrace: error: writing the output failed: %s\n",
               e != 0 ? std::strerror(e) : "write error");
  return kExitError;
}

}  // namespace

}  // namespace detrace::cli

int main(int argc, char** argv) {
  using namespace detrace::cli;
  CLI::App app{
      "detrace: find where two runs of a GPU inference engine stop being bit-identical.\n\n"
      "A run is a directory made by `detrace record` (one .dtrace SQLite file per rank plus\n"
      "manifest.json); every command that reads runs accepts such a directory or one .dtrace file.\n\n"
      "Examples:\n"
      "  detrace record -o runA -- ./app         record a program (no code change)\n"
      "  detrace attach runA start|stop|status   switch recording in a running (--paused) program\n"
      "  detrace diff runA runB                  where and why two runs part\n"
      "  detrace replay runA --event 41          re-execute an op with deterministic alternatives\n"
      "  detrace bisect -- python app.py         record, diff, capture, replay: a verdict\n"
      "  detrace info runA                       summarise a run\n"
      "  detrace info runA --json                the same, for scripts\n"
      "  detrace export runA -o runA.json        open runA.json in ui.perfetto.dev\n"
      "  detrace schema                          the trace format, table by table\n",
      "detrace"};
  app.set_version_flag("--version", std::string("detrace ") + detrace::kToolVersion);
  app.require_subcommand(1);
  app.fallthrough(false);
  Runner run;
  addDiffCommand(app, run);
  addInfoCommand(app, run);
  addExportCommand(app, run);
  addSchemaCommand(app, run);
  addRecordCommand(app, run);
  addReplayCommand(app, run);
  addBisectCommand(app, run);
  addAttachCommand(app, run);
  g_raw_args.assign(argv, argv + argc);
  int rc = kExitError;
  try {
    app.parse(argc, argv);
    rc = run ? run() : kExitError;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version
      rc = app.exit(e) == 0 ? kExitOk : kExitError;
    } else {
      rc = reportError(detrace::Status(detrace::ErrorCode::kInvalidArgument, parseErrorText(app, e, argc, argv)));
    }
  } catch (const std::bad_alloc&) {
    rc = reportError(detrace::Status(detrace::ErrorCode::kIo, "out of memory"));
  } catch (const std::exception& e) {  // a bug in detrace: said as an error, never an abort
    rc = reportError(detrace::Status(detrace::ErrorCode::kInternal,
                                     std::string("unexpected error (a bug in detrace; please report it): ") + e.what()));
  }
  return outputWritten(rc);
}
