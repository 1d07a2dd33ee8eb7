// Replay: re-execute one recorded op (a GEMM or a reducing collective) on the operand bytes
// captured in `full` mode, with the recorded kernel and with deterministic alternatives, and say
// which implementations reproduce the recorded output bit for bit, which are deterministic over
// repeats, how far each lands from the recorded output and from an fp64 reference, and (for a
// batch-size pair) which ones give the request's rows the same bits at both batch sizes.
//
// The library API is value-in, value-out so that other tools (bisect, the viewer) can call it:
//   replayEvent(run, {.rank = 0, .seq = 41}, options)   -> Result<ReplayResult>
//   replayPair(runA, eventA, runB, eventB, options)      -> Result<PairResult>
// Errors (no such event, nothing captured, unsupported op) are Status values whose message says
// what to record to make the event replayable.
//
// Implementations (names accepted by ReplayOptions::impls; a name also selects by prefix, and
// "cpu" / "gpu" select by device):
//   GEMM        recorded            cuBLASLt with the recorded algorithm (id, tile, stages, split-K,
//                                   reduction, swizzle, custom option); needs algo_source 1 or 2
//               cublaslt-heuristic  cuBLASLt's own choice for this shape (batch-variant)
//               cublaslt-pinned     one cuBLASLt algorithm for every M (batch-invariant)
//               wgmma, mma-sync     detrace's batch-invariant kernels (wgmma: Hopper only)
//               planted-splitk      planted batch-variant GEMM (control: split-K at M <= 64)
//               cpu-fp32            CPU: fp32 products and sums, sequential in K (batch-invariant)
//               fp64                CPU: the fp64 reference, rounded to the output type
//   collective  <order>/gpu, <order>/cpu   fixed-order reduction of every rank's captured send
//                                   buffer (kernels/reduce.h) on the GPU and with its CPU twin;
//                                   orders: rank, reversed, ring<s> (from rank s), tree
//               nccl                ncclAllReduce over nranks local GPUs (needs that many)
//               planted-racy        planted racy reduction (control: nondeterministic on purpose)
//               fp64                CPU: fp64 sum, rounded to the dtype
// GPU implementations are reported as skipped when this machine has no usable GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "detrace/base/status.h"
#include "detrace/db/run.h"
#include "detrace/replay/replay_metrics.h"

namespace detrace::replay {

// Called as work advances: `done` of `total` implementation runs finished, `what` is running next.
using ReplayProgress = std::function<void(int done, int total, std::string_view what)>;

struct ReplayOptions {
  std::vector<std::string> impls;  // selection (see above); empty = every implementation
  int repeat = 3;                  // runs of each implementation (the fp64 reference runs once)
  bool allow_gpu = true;           // false: GPU implementations are skipped ("--no-gpu")
  ReplayProgress progress;         // optional
};

// Which event to replay.
struct EventRef {
  int32_t rank = 0;
  int64_t seq = -1;
};

// The outcome of one implementation.
struct ImplResult {
  std::string name;         // "recorded", "ring2/gpu", ...
  std::string description;  // one line: what it is
  bool gpu = false;
  bool control = false;     // a planted defect: expected to misbehave
  std::string skipped;      // non-empty: did not run, and why ("no GPU", "needs 4 GPUs", ...)
  std::string error;        // non-empty: it ran and failed (the kernel's error message)
  int runs = 0;             // executions
  int distinct = 0;         // distinct outputs over `runs` (by digest)
  uint64_t digest = 0;      // digest of the first output
  // Against the recorded output: how many runs matched it bit for bit (nullopt: no recorded
  // output or digest to compare with), and the distance of the first output (when the recorded
  // bytes were captured; a recorded digest allows only the bit-for-bit answer).
  std::optional<int> matches_recorded;
  std::optional<Distance> to_recorded;
  std::optional<Distance> to_reference;  // the first output against the fp64 reference
  bool ran() const { return skipped.empty() && error.empty() && runs > 0; }
};

struct ReplayResult {
  std::string run;        // the run's path as given
  int32_t rank = 0;
  int64_t seq = -1;
  std::string op;         // "GEMM cublasLtMatmul m=32 n=4 k=64 TN bf16->fp32 (algo 6 ...)"
  std::string kind;       // "gemm" or "collective"
  std::string recorded;   // where the recorded output comes from: "captured D", "digest of recv", ""
  OutputShape output;     // the output every implementation produces
  int64_t tokens = 0;     // GEMM: M in detrace's layout (cuBLAS n); collective: output rows
  std::vector<std::string> notes;  // assumptions and caveats (layout repacked, beta = 0, ...)
  std::vector<ImplResult> impls;

  // Names of implementations that ran and matched the recorded output on every run.
  std::vector<std::string> reproducing() const;
};

// Replays `event` of `run` with the selected implementations.
Result<ReplayResult> replayEvent(const db::Run& run, const EventRef& event,
                                 const ReplayOptions& options = {});

// One implementation in a batch-size pair.
struct PairImplResult {
  std::string name;
  bool gpu = false;
  bool control = false;
  std::string skipped;     // did not run in one of the two replays, and why
  int64_t rows = 0;        // request rows compared
  int64_t rows_equal = 0;  // of them bit-identical between the two shapes
  bool invariant() const { return skipped.empty() && rows > 0 && rows_equal == rows; }
};

struct PairResult {
  ReplayResult a, b;
  // The request's rows: (row in A, row in B) for each row of the op with fewer rows.
  std::vector<std::pair<int64_t, int64_t>> rows;
  // The recorded outputs' request rows: compared from captured bytes or per-row digests.
  std::optional<int64_t> recorded_rows_equal;
  std::vector<PairImplResult> impls;
};

// Replays a batch-size pair: the same op at two batch sizes (e.g. bs=1 in run A, bs=64 in run B).
// The request's rows are found in B by the bytes of their inputs (the smaller op's token rows must
// all occur in the larger one's, and the non-token operand must be identical).
Result<PairResult> replayPair(const db::Run& run_a, const EventRef& event_a, const db::Run& run_b,
                              const EventRef& event_b, const ReplayOptions& options = {});

// Reports: the tables `detrace replay` prints, and the same facts as JSON.
std::string formatReplay(const ReplayResult& result);
std::string formatPair(const PairResult& result);
nlohmann::json replayJson(const ReplayResult& result);
nlohmann::json pairJson(const PairResult& result);

// Whether this build can replay (detrace_kernels was built: CUDA 13 was found at build time).
bool replayAvailable();

}  // namespace detrace::replay
