// When a forced CUPTI flush may be made. On the H200 (CUDA 13.0) a forced flush made within about
// 125 ms of the activity records being turned on lost, in one test, the records it should have
// returned, for good (docs/overhead.md, third session of 2026-12-01), so the tracer's forced
// flushes (context teardown, exit, capture stop: cupti_adapter.cc) first wait as this says.
// Plain arithmetic on one clock's nanoseconds, so that CPU tests can check it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace detrace::tracer {

struct FlushSettle {
  int64_t min_recording_ns = 250'000'000;  // the records have been on this long: twice the worst seen
  int64_t max_wait_ns = 250'000'000;       // never wait longer than this
};

// Nanoseconds to wait at `now_ns` before a forced flush: until the records (turned on at
// `records_on_ns`; 0: never, then there is nothing to lose and no wait) have been on
// min_recording_ns; at most max_wait_ns (a `now_ns` read before the records went on, on another
// thread, waits the cap), 0 when they have been on long enough.
constexpr int64_t forcedFlushWaitNs(int64_t now_ns, int64_t records_on_ns, const FlushSettle& s = {}) {
  if (records_on_ns <= 0) return 0;
  return std::clamp(records_on_ns + s.min_recording_ns - now_ns, int64_t{0}, std::max(s.max_wait_ns, int64_t{0}));
}

}  // namespace detrace::tracer
