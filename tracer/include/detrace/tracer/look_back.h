// LookBack: which launches of a look-back deep window (`--deep kernel:NAME@N-B`) keep their
// results. Until the window opens, every launch the deep gate admits is fingerprinted
// speculatively and its results are held, unwritten (Fingerprinter::hold). The window opens at
// launch O (the Nth launch of NAME): the held launches with an index of at least O - B are then
// kept (released), the older ones dropped.
//
// Held results block every result queued after them (the fingerprinter writes in FIFO order), so
// the decision must come however the opening launch ends: captured into a CUDA graph, outside
// `--window`, or followed by no other deep launch. It is therefore made as soon as the gate issues
// its first ticket that is not speculative (issued(), called for every ticket before anything
// else decides about the launch), with the opening launch's own index, not the index of the first
// launch that happens to be fingerprinted after it. A speculative launch begun after that (another
// thread's, admitted just before the window opened) is decided at once. At most B launches are
// held: past that, the one with the lowest index is dropped (launches are numbered in call order,
// so the window, still closed, opens past all of them: that one is no longer within B of it).
// dropAll() gives up on everything held (a capture stop: the window can no longer open in time
// for the recording that was just committed).
//
// Plain C++: the tracer applies the verdicts to its Fingerprinter (deep.cc); CPU tests drive it
// with a WindowGate. Thread-safe; issued() takes no lock once the window has opened, nor for a
// speculative ticket.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "detrace/tracer/window_gate.h"

namespace detrace::tracer {

class LookBack {
 public:
  // `before`: B, the launches before the opening one to keep (> 0).
  explicit LookBack(int64_t before) : before_(before) {}

  // Tokens whose held results are to be written (keep) or thrown away (drop).
  struct Verdicts {
    std::vector<uint64_t> keep, drop;
  };

  // The deep gate issued `ticket` for a launch (every launch, whatever becomes of it). The first
  // ticket that is not speculative decides every launch held so far.
  Verdicts issued(const WindowGate::LaunchTicket& ticket);
  // Launch `token`, admitted speculatively with launch index `index`, was begun: the caller holds
  // its results. Decided at once if the window has opened; else kept held (past B held, the one
  // with the lowest index is dropped).
  Verdicts began(uint64_t token, int64_t index);
  // Recording stops: everything held is dropped.
  Verdicts dropAll();

  // Launches held now (for tests and stats).
  size_t held() const;
  // The index of the launch that opened the window (-1: not yet).
  int64_t openedAt() const { return opened_at_.load(std::memory_order_acquire); }

 private:
  // Sorts one held launch into `v` by the opening at `opened_at`.
  void decide(uint64_t token, int64_t index, int64_t opened_at, Verdicts& v) const;

  const int64_t before_;
  std::atomic<int64_t> opened_at_{-1};
  mutable std::mutex mu_;
  std::map<int64_t, uint64_t> held_;  // launch index -> token
};

}  // namespace detrace::tracer
