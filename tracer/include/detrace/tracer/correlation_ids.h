// CUPTI's correlation ids as the tracer keeps them: 64-bit, never wrapping.
//
// CUPTI numbers every API call it sees with a 32-bit correlation id, process-wide, and the
// numbers wrap after 2^32 calls: hours of a busy server recorded under `detrace attach`. The
// tracer places records and parents by comparing ids, so a wrap would put every later id before
// every earlier one. Each id is unwrapped where it enters (API callbacks, activity records) to the
// 64-bit value that has its low 32 bits and lies nearest the highest id seen so far. That is
// right while every id arrives within 2^31 calls of the newest one; records lag their calls by
// seconds, millions of calls at most.
#pragma once

#include <atomic>
#include <cstdint>

namespace detrace::tracer {

class CorrelationUnwrapper {
 public:
  // Thread-safe, lock-free; one relaxed load on the common path.
  uint64_t unwrap(uint32_t id) noexcept {
    if (id == 0) return 0;  // no correlation
    uint64_t high = high_.load(std::memory_order_relaxed);
    const int64_t delta = static_cast<int32_t>(id - static_cast<uint32_t>(high));
    // Before the first wrap, ids below the high mark by more than it are just small.
    const uint64_t v = delta < 0 && static_cast<uint64_t>(-delta) > high ? id : high + delta;
    // The mark moves in strides, so that threads rarely write it (it may lag by a stride).
    while (v > high + kStride && !high_.compare_exchange_weak(high, v, std::memory_order_relaxed)) {
    }
    return v;
  }

 private:
  static constexpr uint64_t kStride = uint64_t{1} << 20;
  std::atomic<uint64_t> high_{0};
};

// The process's unwrapper (CUPTI's ids are process-wide).
inline uint64_t unwrapCorrelation(uint32_t id) noexcept {
  static CorrelationUnwrapper unwrapper;
  return unwrapper.unwrap(id);
}

}  // namespace detrace::tracer
