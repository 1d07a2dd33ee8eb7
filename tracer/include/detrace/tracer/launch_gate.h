// Launches from two threads at once of the executable graphs that share one set of captured
// digests (graph_fingerprints.cc's LaunchOrder). A launch points the captures' cells at its results
// before its graph (on its stream) and back at nothing after it (at the launch call's exit), and
// every launch, with results or not, records the end a later launch waits for on the GPU. A
// second launch made before the first one's call has ended would be ordered after the launch
// before the first, not after the first: its graph could write into the first's results, or its
// setting of the cells land under the first's graph. So while one thread's launch is open (begun,
// not yet ended), another thread's launch waits for it, on the caller's lock and condition
// variable, up to a deadline; the same thread never waits on itself (an open launch it left
// behind is stale). A program that follows CUDA's rules (calls on one graph object serialized)
// never waits: a launch ends in its call's exit callback, before the call returns.
// Plain logic over standard types, so that CPU tests can check it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace detrace::tracer {

// `Launch`: a nullable handle naming the open launch (a pointer or shared_ptr).
template <class Launch>
class LaunchGate {
 public:
  enum class Entry {
    kFree,      // no other thread's launch was open
    kWaited,    // one was, and it ended before the deadline
    kTimedOut,  // one is still open at the deadline: openLaunch() says which
  };

  // Called with `lk` held (the lock that guards the gate; `cv` is notified by whoever closes).
  // Waits at most `wait` (the clock is read only when there is something to wait for).
  Entry enter(std::unique_lock<std::mutex>& lk, std::condition_variable& cv,
              std::chrono::microseconds wait, std::thread::id self) {
    if (!openByOther(self)) return Entry::kFree;
    // No time to wait never waits: waiting would let a closer in (and call it kWaited).
    if (wait <= std::chrono::microseconds::zero()) return Entry::kTimedOut;
    struct Waiting {  // counted while waiting, even if the wait throws
      int& n;
      explicit Waiting(int& count) : n(++count) {}
      ~Waiting() { --n; }
    } waiting(waiters_);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    const bool freed = cv.wait_until(lk, deadline, [&] { return !openByOther(self); });
    return freed ? Entry::kWaited : Entry::kTimedOut;
  }

  // `launch`, on thread `self`, has pointed the cells at its results.
  void open(Launch launch, std::thread::id self) {
    launch_ = std::move(launch);
    thread_ = self;
  }

  // `launch` ended. True when a thread waits and the condition variable must be notified; false,
  // and nothing changes, when `launch` is not the open one (a newer launch took the gate).
  bool close(const Launch& launch) {
    if (!launch_ || launch_ != launch) return false;
    launch_ = Launch{};
    return waiters_ > 0;
  }

  const Launch& openLaunch() const { return launch_; }
  int waiters() const { return waiters_; }

 private:
  bool openByOther(std::thread::id self) const { return launch_ && thread_ != self; }

  Launch launch_{};
  std::thread::id thread_;
  int waiters_ = 0;
};

}  // namespace detrace::tracer
