// Overhead diagnostics: where the tracer's time goes on the program's threads.
//
// With DETRACE_DIAG_TIMING=1 (read once), each DiagScope adds the wall time it spans and one call
// to its site's counters; at the end of the recording they are written to the trace's stats table
// (`detrace info --json`, bench_overhead --diag) as diag_<site>_ns and diag_<site>_calls, with the
// longest call (diag_<site>_max_ns) and the calls of 100 µs or more (diag_<site>_slow: stalls
// rather than steady cost). Off, a scope costs one predictable branch. Time spent inside CUPTI
// before and after our callbacks, and in the CUDA calls themselves, is not seen here: the
// difference between these sums and the measured slowdown is CUPTI's.
#pragma once

#include <cstdint>

namespace detrace::db {
class TraceWriter;
}

namespace detrace::tracer {

enum class DiagSite : int {
  kLaunchEnter,     // a runtime or direct driver launch's API-enter callback (slot, name, stream)
  kLaunchExit,      // its API-exit callback
  kNestedDriver,    // the driver half of a runtime launch (alias), enter and exit
  kCaptureCheck,    // cuStreamIsCapturing inside kLaunchEnter (included there too)
  kEnterClock,      // ... CUPTI's timestamp and the context's device (included in kLaunchEnter)
  kEnterStream,     // ... the stream's id from the TraceWriter (included in kLaunchEnter)
  kEnterName,       // ... the kernel's name id (included in kLaunchEnter)
  kEnterSlot,       // ... the ReorderBuffer slot (included in kLaunchEnter)
  kOtherCallback,   // resource, NVTX, graph-update and allocation callbacks
  kLibraryOp,       // recording a GEMM, collective or marker (fill, slot, capture marks)
  kOpFill,          // ... the wrapper's fill: arguments, descriptors, algorithm (in kLibraryOp)
  kOpStream,        // ... the op's stream id, device and CUPTI stream (in kOpFill; for a graph
                    // launch placed among kernel records, in kEnterStream)
  kOpPublish,       // ... handing the op to the ReorderBuffer and keeping it as the thread's last
                    // (in kLibraryOp)
  kFingerprint,     // enqueuing a library op's digests (capture check, launches, and an event
                    // where the completion signal cannot be used)
  kFingerprintLock, // ... waiting for the fingerprinter's lock (included in kFingerprint)
  kFingerprintCheck,  // ... the current context and the stream's capture status (in kFingerprint)
  kDigestLaunch,    // ... one digest launch (included in kFingerprint)
  kFingerprintEvent,  // ... the event recorded after an op's digests (included in kFingerprint)
  kActivityBuffer,  // decoding a CUPTI activity buffer (CUPTI's or detrace's flusher thread)
  kFingerprintPoll,  // the flusher writing finished fingerprints to the trace (its thread)
  kMarker,          // a marker call (placement by correlation id: cuDriverGetVersion + callback)
  kGemmWrapper,     // an interposed GEMM call, whole (outermost on its thread: record, forward,
                    // fingerprints, markers)
  kGemmCall,        // ... the forwarded cuBLAS/cuBLASLt call inside it
  kGemmGap,         // from a GEMM call's return to the next GEMM call on its thread (the program's
                    // own work between them: Python, other launches), both while capturing
  // The same three while paused (`record --paused`, or between `attach stop` and `start`), so
  // that one process toggled both ways says which part a capture slows.
  kGemmWrapperPaused,
  kGemmCallPaused,
  kGemmGapPaused,
  kPeriodicFlush,   // the flusher's cuptiActivityFlushAll every 100 ms (its thread)
  kCount
};

namespace detail {
extern const bool g_diag_timing;  // DETRACE_DIAG_TIMING=1, read once when the library loads
}  // namespace detail
inline bool diagTimingOn() { return detail::g_diag_timing; }
int64_t diagNowNs();
void diagAdd(DiagSite site, int64_t ns);
// Adds every site's counters to the trace's stats (called once, when the session finishes).
void diagWriteStats(db::TraceWriter& w);

class DiagScope {
 public:
  explicit DiagScope(DiagSite site) : site_(site), start_(diagTimingOn() ? diagNowNs() : -1) {}
  ~DiagScope() {
    if (start_ >= 0) diagAdd(site_, diagNowNs() - start_);
  }
  DiagScope(const DiagScope&) = delete;
  DiagScope& operator=(const DiagScope&) = delete;

 private:
  DiagSite site_;
  int64_t start_;
};

}  // namespace detrace::tracer
