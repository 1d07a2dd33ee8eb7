// Which launch API call a CUPTI launch callback belongs to, on one thread (cupti_adapter.cc keeps
// one per thread). A runtime launch nests its driver half: the same launch under another
// correlation id, seen as a driver callback between the runtime's enter and exit. A driver launch
// outside one is a launch of its own. And a graph launch opened for the fingerprinter at its enter
// (beginReplay, or ordered without results) is closed at the first exit that follows its graph's
// submission: its own, or its driver half's.
//
// Exits can be lost: a stop turns the runtime's launch callbacks off, while the driver's graph
// launch callbacks stay on (once a graph holds captured digests), so a runtime launch cut short
// by a stop never sees its exit. A driver graph launch under a runtime launch that is not a graph
// launch, or under a runtime graph launch whose driver half already came and went, is then a
// launch of its own, not a driver half. A capture start forgets the rest (reset()).
// Plain logic over standard types, so that CPU tests can check it.
#pragma once

#include <cstdint>
#include <utility>

namespace detrace::tracer {

class LaunchNesting {
 public:
  // A capture start: a launch whose exit a stop cut off leaves nothing behind. An open graph
  // launch stays open: its driver half's exit still comes (the driver's graph launch callbacks
  // stay on) and closes it. If the start came between its runtime enter and its driver half, that
  // half now counts as a launch of its own, whose enter closes the first one
  // (Fingerprinter::abandonReplay) before ordering its graph again.
  void reset() {
    depth_ = 0;
    runtime_token_ = 0;
    driver_token_ = 0;
  }

  // A driver launch's enter: true when it is the driver half of the runtime launch in progress.
  bool driverHalf(bool graph) {
    if (depth_ > 0 && graph && (!runtime_graph_ || runtime_driver_done_)) depth_ = 0;  // exit lost
    if (depth_ == 0) return false;
    driver_token_ = 0;
    return true;
  }

  // A launch that is not a driver half begins; `token`: its slot (0: none, or not yet).
  void enter(bool runtime, uint64_t token, bool graph) {
    if (runtime) {
      ++depth_;
      runtime_token_ = token;
      runtime_graph_ = graph;
      runtime_driver_done_ = false;
    } else {
      driver_token_ = token;
    }
  }

  // The graph launch just entered (in `runtime`'s domain) was opened for the fingerprinter.
  void openGraph(bool runtime) {
    graph_open_ = true;
    graph_runtime_ = runtime;
  }

  struct Exit {
    uint64_t token = 0;        // the launch's slot (0: none)
    bool close_graph = false;  // the open graph launch ends here (Fingerprinter::endReplay)
  };
  Exit exit(bool runtime, bool graph) {
    Exit e;
    if (runtime) {
      if (depth_ > 0) --depth_;
      e.token = std::exchange(runtime_token_, 0);  // a later exit without an enter names no slot
    } else {
      e.token = std::exchange(driver_token_, 0);
      if (graph && depth_ > 0 && runtime_graph_) runtime_driver_done_ = true;
    }
    // A driver graph launch's exit closes the launch its runtime half opened: the graph is
    // queued then, and the runtime's exit may not come (paused).
    if (graph_open_ && (graph_runtime_ == runtime || (!runtime && graph))) {
      graph_open_ = false;
      e.close_graph = true;
    }
    return e;
  }

  // The exit of a plain runtime launch on the fast path (its slot is its own business).
  void leaveRuntime() {
    if (depth_ > 0) --depth_;
  }

  int depth() const { return depth_; }
  bool graphOpen() const { return graph_open_; }
  uint64_t runtimeToken() const { return runtime_token_; }

 private:
  int depth_ = 0;               // runtime launches entered and not exited
  uint64_t runtime_token_ = 0;  // slot of the runtime launch in progress
  bool runtime_graph_ = false;  // that launch is a graph launch
  bool runtime_driver_done_ = false;  // and its driver half's exit came
  uint64_t driver_token_ = 0;  // slot of the driver launch in progress
  bool graph_open_ = false;    // a graph launch opened for the fingerprinter, not closed yet
  bool graph_runtime_ = false;  // opened at a runtime enter
};

}  // namespace detrace::tracer
