// WindowGate: decides, call by call, whether the tracer records it, for `--window`. It counts
// every kernel and graph launch and every library op (GEMM, collective), each in a count of its
// own, in call order whether recorded or not, so indices mean the same in every run of a program,
// and it follows NVTX step ranges. Lock-free; plain C++ so CPU tests drive it. The deep window
// (`--deep`) is a second gate fed the same calls.
#pragma once

#include <atomic>
#include <cstdint>

#include "detrace/tracer/capture_policy.h"

namespace detrace::tracer {

class WindowGate {
 public:
  explicit WindowGate(RecordWindow window = {}) : window_(window) {}

  bool windowed() const { return window_.unit != RecordWindow::Unit::kAll; }
  // A launch is being made: whether to record it. `name`: the kernel's (mangled) name when known,
  // which a kernel:NAME@N window matches; other windows ignore it.
  struct LaunchTicket {
    bool record = true;
    // A kernel window that looks back (kernel:NAME@N-B) and has not opened yet admits every launch
    // speculatively: the caller keeps it only if the window opens within B launches after it.
    bool speculative = false;
    int64_t index = 0;  // the launch's index, counted from 0 in call order
    // A kernel window: the index of the launch that opened it, once it has (-1: not yet, or
    // another kind of window).
    int64_t opened_at = -1;
  };
  LaunchTicket admitLaunchTicket(const char* name = nullptr);
  bool admitLaunch(const char* name = nullptr) { return admitLaunchTicket(name).record; }
  // A library op is being called: its index (counted from 0 in call order) and whether to record.
  struct OpTicket {
    int64_t index = 0;
    bool record = true;
  };
  OpTicket admitOp();
  // An NVTX range was pushed on thread `thread` with `depth` ranges already open there;
  // `is_step`: its text names a step. Returns whether to record the marker.
  bool notePush(bool is_step, int depth, uint64_t thread = 0);
  // The range at `depth` (the count left open after the pop) was popped on `thread`. A step ends
  // only when the thread that opened it pops it (NVTX depth is per thread). Whether to record it.
  bool notePop(int depth, uint64_t thread = 0);
  // Steps started so far.
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }

 private:
  bool openForSteps() const;
  void admitKernelWindow(const char* name, LaunchTicket& t);

  RecordWindow window_;
  std::atomic<int64_t> launches_{0};
  std::atomic<int64_t> ops_{0};
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> current_step_{-1};
  std::atomic<int> step_depth_{-1};  // depth of the open step range; -1: between steps
  std::atomic<uint64_t> step_thread_{0};  // the thread that opened it
  std::atomic<int64_t> kernel_matches_{0};  // kernel:NAME@N: launches of NAME so far
  std::atomic<int64_t> kernel_open_{-1};    // launch index of the Nth one (-1: not yet)
};

}  // namespace detrace::tracer
