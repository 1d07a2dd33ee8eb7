// See window_gate.h.
#include "detrace/tracer/window_gate.h"

#include <cstring>

namespace detrace::tracer {

bool WindowGate::openForSteps() const {
  return step_depth_.load(std::memory_order_relaxed) >= 0 &&
         window_.range.contains(current_step_.load(std::memory_order_relaxed));
}

void WindowGate::admitKernelWindow(const char* name, LaunchTicket& t) {
  int64_t open = kernel_open_.load(std::memory_order_relaxed);
  if (open >= 0) {
    t.opened_at = open;
    t.record = t.index - open < window_.range.end - window_.range.begin;
    return;
  }
  if (kernelNameMatches(window_, name) &&
      kernel_matches_.fetch_add(1, std::memory_order_relaxed) == window_.range.begin) {
    kernel_open_.store(t.index, std::memory_order_relaxed);
    t.opened_at = t.index;
    t.record = true;
    return;
  }
  t.record = t.speculative = window_.before > 0;
}

WindowGate::LaunchTicket WindowGate::admitLaunchTicket(const char* name) {
  LaunchTicket t;
  t.index = launches_.fetch_add(1, std::memory_order_relaxed);
  switch (window_.unit) {
    case RecordWindow::Unit::kKernel: admitKernelWindow(name, t); break;
    case RecordWindow::Unit::kAll: t.record = true; break;
    case RecordWindow::Unit::kLaunches: t.record = window_.range.contains(t.index); break;
    case RecordWindow::Unit::kOps: {
      // Kernels between library ops: recorded while the count of ops called so far is in
      // (A, B], so op A's own kernels and every kernel after them up to op B's call are in.
      int64_t ops = ops_.load(std::memory_order_relaxed);
      t.record = ops > window_.range.begin && ops <= window_.range.end;
      break;
    }
    case RecordWindow::Unit::kSteps: t.record = openForSteps(); break;
  }
  return t;
}

WindowGate::OpTicket WindowGate::admitOp() {
  OpTicket t;
  t.index = ops_.fetch_add(1, std::memory_order_relaxed);
  switch (window_.unit) {
    case RecordWindow::Unit::kAll: t.record = true; break;
    case RecordWindow::Unit::kOps: t.record = window_.range.contains(t.index); break;
    case RecordWindow::Unit::kLaunches:
      t.record = window_.range.contains(launches_.load(std::memory_order_relaxed));
      break;
    case RecordWindow::Unit::kSteps: t.record = openForSteps(); break;
    case RecordWindow::Unit::kKernel: {
      // Library ops between the window's launches (the kernel window is a span of launches).
      int64_t open = kernel_open_.load(std::memory_order_relaxed);
      t.record = open >= 0 && launches_.load(std::memory_order_relaxed) - open <
                                  window_.range.end - window_.range.begin;
      break;
    }
  }
  return t;
}

bool WindowGate::notePush(bool is_step, int depth, uint64_t thread) {
  if (is_step && step_depth_.load(std::memory_order_relaxed) < 0) {
    current_step_.store(steps_.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
    step_thread_.store(thread, std::memory_order_relaxed);
    step_depth_.store(depth, std::memory_order_relaxed);
  }
  return window_.unit != RecordWindow::Unit::kSteps || openForSteps();
}

bool WindowGate::notePop(int depth, uint64_t thread) {
  bool record = window_.unit != RecordWindow::Unit::kSteps || openForSteps();
  if (step_depth_.load(std::memory_order_relaxed) == depth &&
      step_thread_.load(std::memory_order_relaxed) == thread) {
    step_depth_.store(-1, std::memory_order_relaxed);
  }
  return record;
}

}  // namespace detrace::tracer
