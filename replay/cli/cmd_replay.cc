// detrace replay RUN --event E [--rank R] [--impl LIST] [--repeat N] [--pair RUN_B --event-b E2]
//                [--no-gpu] [--progress] [--json]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "detrace/db/run.h"
#include "detrace/replay/replay.h"

namespace detrace::cli {
namespace {

constexpr const char* kReplayFooter =
    "Re-executes one recorded GEMM or reducing collective (AllReduce, ReduceScatter, Reduce) on\n"
    "the operand bytes captured by `detrace record --capture full`, with the recorded kernel and\n"
    "with deterministic alternatives, each --repeat times. For each implementation: how many\n"
    "distinct outputs it gave, whether it reproduces the recorded output bit for bit, and its\n"
    "largest distance (ULPs, absolute, relative) to the recorded output and to an fp64 reference.\n"
    "A collective is replayed from every rank's captured send buffer.\n\n"
    "Implementations (--impl takes names, NAME/ prefixes, '*' globs and the groups cpu, gpu,\n"
    "controls):\n"
    "  GEMM        recorded, cublaslt-heuristic, cublaslt-pinned, wgmma, mma-sync,\n"
    "              planted-splitk (control), cpu-fp32, fp64\n"
    "  collective  rank, reversed, ring<s>, tree (each as <order>/gpu and <order>/cpu), nccl,\n"
    "              det-allreduce (AllReduce: kernels' PeerAllReduce, deterministic, across\n"
    "              the local GPUs), planted-racy (control), fp64; nccl and det-allreduce need\n"
    "              as many local GPUs as the collective had ranks\n"
    "GPU implementations are shown as skipped on a machine without a GPU (or with --no-gpu).\n\n"
    "--pair RUN_B --event-b E2 replays the same op at another batch size (e.g. bs=1 in RUN,\n"
    "bs=64 in RUN_B), finds the request's rows in the larger op by their input bytes and says\n"
    "which implementations give those rows the same bits at both sizes.\n\n"
    "Examples:\n"
    "  detrace replay runA --event 41                      every implementation, 3 runs each\n"
    "  detrace replay runA --event 12 --impl ring,planted-racy --repeat 20\n"
    "  detrace replay bs1 --event 41 --pair bs64 --event-b 42\n\n"
    "Exit status: 0 the replay ran (whatever it found; --json has the findings), 2 error (no such\n"
    "event, operands not captured, unsupported op, or nothing ran: every implementation selected\n"
    "was skipped).\n";

struct ReplayCliOptions {
  std::string run;
  int64_t event = -1;
  int rank = 0;
  std::vector<std::string> impls;
  int repeat = 3;
  std::string pair_run;
  int64_t event_b = -1;
  bool no_gpu = false;
  bool progress = false;
  bool json = false;
};

// A one-line progress bar on stderr, redrawn in place.
void drawProgress(int done, int total, std::string_view what) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  if (what.empty()) {
    std::fprintf(stderr, "\r%*s\r", kWidth + 60, "");
    return;
  }
  std::fprintf(stderr, "\r[%.*s%*s] %d/%d %-24.24s", filled, "##############################",
               kWidth - filled, "", done, total, std::string(what).c_str());
  std::fflush(stderr);
}

// The names in --impl's words ("a,b" "c" -> a, b, c), empty ones (`a,,b`) left out.
std::vector<std::string> splitNames(const std::vector<std::string>& words) {
  std::vector<std::string> names;
  for (const std::string& w : words) {
    size_t begin = 0;
    while (begin <= w.size()) {
      const size_t end = std::min(w.find(',', begin), w.size());
      if (end > begin) names.push_back(w.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  return names;
}

// A replay in which every selected implementation was skipped (GPU ones under --no-gpu or without
// a GPU) ran nothing: an error a script can see, after the table that says why each was skipped.
Status somethingRan(const std::vector<replay::ImplResult>& impls) {
  if (std::any_of(impls.begin(), impls.end(), [](const replay::ImplResult& i) { return i.ran() || !i.error.empty(); })) {
    return Status::ok();
  }
  const std::string why = impls.empty() ? std::string("none was selected") : impls.front().skipped;
  return makeError(ErrorCode::kInvalidArgument,
                   "nothing ran: every implementation selected was skipped ({}); select ones that "
                   "can run here (--impl cpu, or drop --no-gpu on a GPU machine)",
                   why);
}

// The replay's facts, with the exit status and, where nothing could run, the error (the object
// reportError would print, merged: a script reads one object either way).
nlohmann::json withExitStatus(nlohmann::json j, const Status& ran) {
  j["exit_status"] = ran.isOk() ? kExitOk : kExitError;
  if (!ran.isOk()) j["error"] = {{"code", errorCodeName(ran.code())}, {"message", ran.message()}};
  return j;
}

int runReplay(const ReplayCliOptions& o) {
  replay::ReplayOptions options;
  options.impls = o.impls;
  options.repeat = o.repeat;
  options.allow_gpu = !o.no_gpu;
  if (o.progress || isatty(STDERR_FILENO)) options.progress = drawProgress;
  auto run = db::Run::open(o.run);
  if (!run.isOk()) return reportError(run.status());
  const replay::EventRef a{o.rank, o.event};
  if (o.pair_run.empty()) {
    auto result = replay::replayEvent(*run, a, options);
    if (!result.isOk()) return reportError(result.status());
    const Status ran = somethingRan(result->impls);
    if (o.json) {
      printJson(withExitStatus(replay::replayJson(*result), ran));
    } else {
      std::printf("%s", replay::formatReplay(*result).c_str());
    }
    return ran.isOk() ? kExitOk : reportError(ran);
  }
  auto run_b = db::Run::open(o.pair_run);
  if (!run_b.isOk()) return reportError(run_b.status());
  const replay::EventRef b{o.rank, o.event_b >= 0 ? o.event_b : o.event};
  auto pair = replay::replayPair(*run, a, *run_b, b, options);
  if (!pair.isOk()) return reportError(pair.status());
  const Status ran = somethingRan(pair->a.impls);
  if (o.json) {
    printJson(withExitStatus(replay::pairJson(*pair), ran));
  } else {
    std::printf("%s", replay::formatPair(*pair).c_str());
  }
  return ran.isOk() ? kExitOk : reportError(ran);
}

}  // namespace

void addReplayCommand(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<ReplayCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Re-execute a recorded op on its captured inputs with deterministic alternatives.");
  cmd->add_option("RUN", opts->run, "Run directory (or .dtrace file) recorded with --capture full")
      ->required();
  cmd->add_option("--event", opts->event, "Sequence number of the GEMM or collective to replay")
      ->required()
      ->check(nonNegativeInteger())
      ->type_name("SEQ");
  cmd->add_option("--rank", opts->rank, "Rank whose event it is (default 0)")
      ->check(nonNegativeInteger())
      ->type_name("R");
  CLI::Option* impl = cmd->add_option("--impl", opts->impls,
                  "Implementations to run, comma-separated (default: all; see below)")
      ->allow_extra_args(false);  // one word per --impl, split here (CLI11's split of ",,," took
                                  // the option after it as a name)
  cmd->add_option("--repeat", opts->repeat, "Runs of each implementation (default 3)")
      ->check(integerIn(1, 100000))
      ->type_name("N");
  cmd->add_option("--pair", opts->pair_run,
                  "A second run holding the same op at another batch size (batch-size pair)");
  cmd->add_option("--event-b", opts->event_b,
                  "The op's sequence number in the --pair run (default: --event)")
      ->check(nonNegativeInteger())
      ->type_name("SEQ");
  cmd->add_flag("--no-gpu", opts->no_gpu, "Run only the CPU implementations");
  cmd->add_flag("--progress", opts->progress,
                "Draw the progress bar on stderr even when it is not a terminal");
  cmd->add_flag("--json", opts->json, "Print the results as JSON");
  cmd->footer(kReplayFooter);
  cmd->callback([opts, impl, &run] {
    const bool impl_given = impl->count() > 0;
    run = [opts, impl_given] {
      opts->impls = splitNames(opts->impls);
      if (impl_given && opts->impls.empty()) {  // `--impl ,` or `--impl ''`
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  "--impl names no implementation: give it one or more names, e.g. "
                                  "--impl cpu-fp32,fp64 (leave --impl out to run them all)"));
      }
      // `--impl --no-gpu`: CLI11 takes the word after --impl whatever it is.
      for (const std::string& name : opts->impls) {
        if (name.front() == '-') {
          return reportError(makeError(ErrorCode::kInvalidArgument,
                                       "--impl took '{}' as an implementation's name: give --impl a "
                                       "name, e.g. --impl cpu-fp32,fp64",
                                       name));
        }
      }
      if (opts->event_b >= 0 && opts->pair_run.empty()) {
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  "--event-b names the op in the --pair run; add --pair RUN_B"));
      }
      return runReplay(*opts);
    };
  });
}

}  // namespace detrace::cli
