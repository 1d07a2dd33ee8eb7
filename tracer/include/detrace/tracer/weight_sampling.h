// Which replays of an executable graph digest their GEMMs' weights under
// `record --graph-weights-every N` (graph_fingerprints.cc). Plain arithmetic, so that CPU tests
// can check it.
//
// The replays given fingerprints are numbered in the order they are queued for the drain (the
// caller holds the fingerprinter's lock), so a replay that carries a weight digest drains after
// the sampled replay it carries from, whichever thread queued either (two threads launching one
// executable graph at once are kept apart by launch_gate.h).
// A launch turned away (a full ring, ...) takes no number. Replays 0, N, 2N, ... digest the
// weights, counted again from the first replay after each capture start: a digest taken before a
// pause may be older than what the program did while it was not recorded.
#pragma once

#include <cstdint>

namespace detrace::tracer {

class WeightSampler {
 public:
  struct Turn {
    int64_t sample = -1;        // this replay's number among those queued
    int64_t weights_from = -1;  // the sampled replay whose weight digests it gets (or itself)
    bool sampled() const { return weights_from == sample; }
  };

  // The next replay's turn; `capture_starts` is Session::captureStarts() now, `every` the N
  // (values below 2 sample every replay).
  Turn next(uint64_t capture_starts, int64_t every) {
    if (capture_starts != capture_starts_) {
      capture_starts_ = capture_starts;
      from_ = queued_;
    }
    Turn t;
    t.sample = queued_++;
    t.weights_from = t.sample - (every > 1 ? (t.sample - from_) % every : 0);
    return t;
  }

 private:
  int64_t queued_ = 0;
  uint64_t capture_starts_ = 0;
  int64_t from_ = 0;  // the replay sampling counts from
};

}  // namespace detrace::tracer
