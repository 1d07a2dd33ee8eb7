// detrace bisect [--workdir DIR] [--repeat N] [--batch auto|on|off] [--no-gpu] [--no-deep] [--json]
//                -- COMMAND... [:: COMMAND_B...]
#include <algorithm>
#include <cstdio>
#include <memory>

#include <unistd.h>

#include "commands.h"
#include "detrace/replay/bisect.h"

namespace detrace::cli {
namespace {

constexpr const char* kBisectHelp =
    "Find, confirm and explain a divergence on its own: records COMMAND twice at digest level (or\n"
    "COMMAND and COMMAND_B, e.g. the same request at bs=1 and bs=64), diffs the two runs, records\n"
    "the op where divergence begins again with its operands captured (--capture full\n"
    "--capture-range I: one op, so the cost stays low), replays it with the recorded kernel and the\n"
    "deterministic alternatives, and ends with a verdict: where, what kind, the replay's evidence,\n"
    "the alternative that removes it, and the command of every step. Every run and log is kept in\n"
    "the work directory.";

constexpr const char* kBisectFooter =
    "Examples:\n"
    "  detrace bisect -- python serve_once.py --prompt-file p.txt\n"
    "      run-to-run: is the same program nondeterministic, where, and which kernel fixes it?\n"
    "  detrace bisect --batch on -- python app.py --batch 1 :: python app.py --batch 64\n"
    "      batch invariance: the request alone vs inside a batch of 64 (the request is row 0)\n"
    "\n"
    "The two-command form separates the commands with a lone `::`. Recordings: 2 at digest level,\n"
    "then 1 (run-to-run) or 2 (pair) with the suspect op captured, or 2 in deep mode; the program\n"
    "must be repeatable in structure (the same sequence of GEMMs and collectives each time), as\n"
    "inference is.\n"
    "When the divergence enters through raw kernels between two fingerprinted ops, the stretch\n"
    "is recorded twice more with --deep ops:E:F (E: the last op whose outputs matched, F: the op\n"
    "whose inputs differed; deep mode zero-fills new allocations) and the diff of those runs names\n"
    "the kernel that got identical memory and produced different memory. --no-deep skips that\n"
    "step; a two-command pair skips it (its launches see different shapes).\n"
    "\n"
    "Exit status: 0 no divergence, 1 divergence found (the verdict says where), 2 error, or\n"
    "INCOMPLETE: a rank missing or unreadable in one recording while the ranks compared agree.\n";

}  // namespace

void addBisectCommand(CLI::App& app, Runner& run) {
  struct Options {
    std::string workdir = "detrace-bisect";
    int repeat = 5;
    std::string batch = "auto";
    bool no_gpu = false;
    bool no_deep = false;
    bool json = false;
    std::vector<std::string> command;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bisect", kBisectHelp);
  cmd->add_option("--workdir", opts->workdir, "Directory for the runs and logs (created; runs in it are replaced)")
      ->capture_default_str();
  cmd->add_option("--repeat", opts->repeat, "Replay runs of each implementation")
      ->check(integerIn(1, 1000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_option("--batch", opts->batch, "Batch-size mode of the diff: auto (detect), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--no-gpu", opts->no_gpu, "Replay with the CPU implementations only");
  cmd->add_flag("--no-deep", opts->no_deep,
                "Do not re-record a raw-kernel stretch in deep mode to name its kernel");
  cmd->add_flag("--json", opts->json, "Print the steps, replay tables and verdict as JSON");
  cmd->add_option("COMMAND", opts->command, "The program (and a second one after ::), after --");
  cmd->footer(kBisectFooter);
  cmd->callback([opts, &run] {
    run = [opts] {
      const auto& args = rawArgs();
      if (std::find(args.begin(), args.end(), "--") == args.end() || opts->command.empty()) {
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  "put the command to bisect after --, e.g. detrace bisect -- python app.py"));
      }
      replay::BisectOptions o;
      auto sep = std::find(opts->command.begin(), opts->command.end(), "::");
      o.command_a.assign(opts->command.begin(), sep);
      if (sep != opts->command.end()) o.command_b.assign(sep + 1, opts->command.end());
      if (o.command_a.empty() || (sep != opts->command.end() && o.command_b.empty())) {
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  "an empty command around ::; write CMD_A ... :: CMD_B ..."));
      }
      if (std::count(opts->command.begin(), opts->command.end(), "::") > 1) {
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  "bisect compares two commands: one :: between them, not more "
                                  "(CMD_A ... :: CMD_B ...)"));
      }
      if (!opts->workdir.empty() && opts->workdir[0] == '-') {  // `--workdir -- cmd`
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  fmt::format("--workdir got \"{}\", which looks like a flag: give the "
                                              "directory right after --workdir (write ./{} for a "
                                              "directory whose name starts with -)",
                                              opts->workdir, opts->workdir)));
      }
      o.workdir = opts->workdir;
      o.repeat = opts->repeat;
      o.allow_gpu = !opts->no_gpu;
      o.deep = !opts->no_deep;
      if (opts->batch != "auto") o.batch = opts->batch == "on";
      bool tty = isatty(STDERR_FILENO) != 0;
      o.progress = [tty](const std::string& line) {
        std::fprintf(stderr, tty ? "\r\033[Kdetrace bisect: %s" : "detrace bisect: %s\n", line.c_str());
      };
      auto r = replay::bisect(o);
      if (tty) std::fprintf(stderr, "\r\033[K");
      if (!r.isOk()) return reportError(r.status());
      if (opts->json) {
        printJson(replay::bisectJson(*r));
      } else {
        std::printf("%s", replay::formatBisect(*r).c_str());
      }
      return r->diverged ? kExitDivergent : r->incomplete ? kExitError : kExitOk;
    };
  });
}

}  // namespace detrace::cli
