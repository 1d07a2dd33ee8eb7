// When a forced CUPTI flush may be made. On the H200 (CUDA 13.0) a forced flush made within about
// 125 ms of the activity records being turned on lost the records it should have returned, for
// good (docs/overhead.md, third session of 2026-12-01), so the tracer's forced flushes (context
// teardown, exit, capture stop: cupti_adapter.cc) first wait as this says. Plain arithmetic on
// one clock's nanoseconds, so that CPU tests can check it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace detrace::tracer {

struct FlushSettle {
  int64_t min_recording_ns = 250'000'000;  // the records have been on this long
  int64_t min_context_ns = 20'000'000;     // the context being torn down is this old
  int64_t max_wait_ns = 250'000'000;       // never wait longer than this
};

// Nanoseconds to wait at `now_ns` before a forced flush: until the records (turned on at
// `records_on_ns`; 0: never, then there is nothing to lose and no wait) have been on long enough
// and the context (created at `context_created_ns`; 0: unknown or none) is old enough; at most
// max_wait_ns, 0 when both already hold.
constexpr int64_t forcedFlushWaitNs(int64_t now_ns, int64_t records_on_ns, int64_t context_created_ns,
                                    const FlushSettle& s = {}) {
  if (records_on_ns <= 0) return 0;
  int64_t until = records_on_ns + s.min_recording_ns;
  if (context_created_ns > 0) until = std::max(until, context_created_ns + s.min_context_ns);
  return std::clamp(until - now_ns, int64_t{0}, s.max_wait_ns);
}

}  // namespace detrace::tracer
