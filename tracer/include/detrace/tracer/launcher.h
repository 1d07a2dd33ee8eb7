// The launcher behind `detrace record`: prepares a run directory, starts the command with the
// tracer injected (CUDA_INJECTION64_PATH and LD_PRELOAD), waits for it and finishes the manifest.
// Every process the command spawns inherits the environment, so each one records itself into
// RUN_DIR/proc-<pid>.dtrace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detrace/base/status.h"

namespace detrace::tracer {

inline constexpr const char* kTracerLibraryName = "libdetrace_tracer.so";

struct RecordOptions {
  std::string out_dir;               // the run directory (created if missing)
  bool force = false;                // replace the traces of a non-empty run directory
  int64_t queue = 0;                 // events the per-process writer queue holds; 0: default
  std::string capture = "digest";    // "meta": launches and library calls; "digest": + fingerprints;
                                     // "full": + copies of the selected operands' bytes
  std::optional<int64_t> max_capture_bytes;  // full: cap on captured bytes per process (> 0);
                                             // not given: the default (1 GiB)
  std::string capture_ops;           // full: which ops' operands to copy ("" = all library ops)
  std::string capture_range;         // full: library-op index range "A:B" ("" = every op)
  std::string window;                // record only this window ("" = everything); see tracer docs
  std::string deep;                  // deep window ("" = none): launches' memory before and after
  bool paused = false;               // start dormant: nothing is recorded until `detrace attach`
  bool launch_callbacks = false;     // follow every launch through CUPTI callbacks (else: placement
                                     // of kernel records by correlation id where allowed)
  std::string row_digests = "tokens";  // which GEMM operands get per-row digests: tokens or all
  int64_t graph_weights_every = 1;     // a graph-replayed GEMM's weight: digested every Nth replay
  std::vector<std::string> command;  // the program and its arguments
  std::string tracer_library;        // empty: findTracerLibrary()
};

struct RecordResult {
  int exit_status = 0;  // the command's exit status; 128 + N if it was killed by signal N
  int term_signal = 0;  // N if signal N killed the command, else 0
  std::vector<std::string> trace_files;  // the proc-*.dtrace files the run directory holds
};

// Finds libdetrace_tracer.so: $DETRACE_TRACER_LIB, else next to this executable's build layout
// (<exe dir>/../tracer/) or install layout (<exe dir>/../lib/detrace/, <exe dir>/).
Result<std::string> findTracerLibrary();

// The environment variables the manifest keeps: CUDA_*, NCCL_*, CUBLAS*, NVIDIA_*, TORCH_*,
// PYTORCH_*, OMP_NUM_THREADS (without detrace's own injection variables).
bool isRecordedEnvVar(const std::string& name);

// Checks the capture options (level, --capture-ops, --capture-range, --window) without starting
// anything: the error says what is accepted.
Status checkCaptureOptions(const RecordOptions& options);

// Whether `record` sets this variable itself (from its options: DETRACE_CAPTURE, DETRACE_WINDOW,
// ...; and CUDA_INJECTION64_PATH), so that the user's environment's value is not passed on: a
// stale one must not change what the options ask for. Every other variable, the tracer's other
// settings among them (README, "Environment honoured"), reaches the recorded command as it is.
bool isSetByRecord(std::string_view key);

// The variables that configure the tracer in the recorded processes (DETRACE_*, and the
// injection paths), given the tracer library and the absolute run directory.
std::vector<std::string> tracerEnvironment(const RecordOptions& options, const std::string& lib,
                                           const std::string& out_dir);

// Runs the whole recording. Errors (no command, command not found, a non-empty or unwritable
// run directory, no tracer library) come back before anything is started. While the command
// runs, SIGINT/SIGTERM/SIGHUP sent to detrace are passed on to it.
Result<RecordResult> record(const RecordOptions& options);

}  // namespace detrace::tracer
