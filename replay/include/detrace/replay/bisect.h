// Bisect: drive the whole investigation from the command line of a program.
//
//   1. record the program twice at `digest` level (or two programs: bs=1 vs bs=N);
//   2. diff the two runs: where divergence begins and what kind it is;
//   3. re-record the suspect op with `--capture full --capture-range I` (I = its library-op
//      index, the same in every run of the program), in both runs for a batch-size pair;
//   4. replay the captured op with the recorded kernel and the deterministic alternatives;
//   5. a verdict: where, what kind, the replay's evidence, the alternative that removes it, and
//      the command of every step.
// When divergence enters between two fingerprinted ops instead (raw kernels in between: the op's
// inputs already differed), steps 3-4 become the deep step: the program is recorded twice more
// with `--deep ops:E:F` (E, F: the library-op indices of the last op whose outputs matched and of
// the op, so the window holds E's kernels and the raw kernels up to F), and the diff of those runs
// names the kernel that got identical memory and produced different memory (deep_diff.h). It is
// run to run only: a batch-size pair's launches see different shapes, so it is skipped there.
// The number of recordings is fixed (2 + 1 or 2 + 2); every run and log stays in the work
// directory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "detrace/base/status.h"
#include "detrace/replay/diff.h"
#include "detrace/replay/replay.h"

namespace detrace::replay {

struct BisectOptions {
  std::vector<std::string> command_a;  // the program (recorded twice unless command_b is given)
  std::vector<std::string> command_b;  // the two-command form: e.g. the same request at bs=64
  std::string workdir;                 // runs and logs; created if missing
  std::optional<bool> batch;           // batch-size mode for the diff; unset = detect
  int repeat = 5;                      // replay repeats of each implementation
  bool allow_gpu = true;
  bool deep = true;                    // the deep step, when divergence enters through raw kernels
  std::string detrace_exe;             // the `detrace` used to record; empty = this executable
  std::function<void(const std::string&)> progress;  // one line per step, as it starts
};

struct BisectStep {
  std::string what;     // "record A (digest)", "diff", "replay", ...
  std::string command;  // the command that reproduces this step
  double seconds = 0;
  std::string outcome;  // one line
};

// The deep step: the stretch before the suspect re-recorded in deep mode, twice, and diffed.
struct BisectDeep {
  std::string window;   // the --deep window; "" if the step did not record
  std::string skipped;  // why it did not run (or was not needed, or failed); "" if it ran
  bool diverged = false;          // the deep runs diverged at all
  std::optional<DeepDiff> diff;   // their deep launches on the suspect's rank
  std::string verdict;            // what the step found, in one paragraph
};

struct BisectResult {
  std::vector<BisectStep> steps;
  bool diverged = false;
  // No divergence on the ranks compared, but a rank of either recording was not compared (a file
  // missing or unreadable): neither answer (INCOMPLETE, exit status 2).
  bool incomplete = false;
  std::vector<int32_t> uncompared_ranks;
  std::optional<RunDiff> diff;  // of the two digest-level runs
  int32_t rank = -1;            // where divergence began
  int64_t seq_a = -1, seq_b = -1;
  int64_t op_index_a = -1, op_index_b = -1;  // library-op index of the suspect in each run
  std::string suspect;                       // describeOp() of the suspect (A's side, else B's)
  std::string classification;                // pairStatusName of the first divergence
  std::string why;                           // the diff's explanation of it
  std::optional<int64_t> entered_after;      // propagated: the last event whose outputs matched
  std::vector<std::string> warnings;         // the diff's warnings (no fingerprints, ...)
  std::string replay_error;                  // why the suspect was not replayed, if it was not
  std::optional<ReplayResult> replay;
  std::optional<PairResult> pair;
  std::optional<BisectDeep> deep;  // the deep step, when it applied
  std::string verdict;  // the closing paragraph
  double seconds = 0;
};

Result<BisectResult> bisect(const BisectOptions& options);

std::string formatBisect(const BisectResult& result);
nlohmann::json bisectJson(const BisectResult& result);

// The library-op index (GEMMs and collectives counted from 0 in trace order) of event `seq` on
// `rank`, and the event with a given index; errors if there is none.
Result<int64_t> libraryOpIndex(const db::Run& run, int32_t rank, int64_t seq);
Result<int64_t> libraryOpSeq(const db::Run& run, int32_t rank, int64_t index);

}  // namespace detrace::replay
