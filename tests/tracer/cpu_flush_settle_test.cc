// forcedFlushWaitNs (flush_settle.h): how long a forced CUPTI flush waits for the records to
// settle. Fixed cases for the rule and the cap, then random instants checked against what the
// wait promises.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "detrace/tracer/flush_settle.h"

namespace detrace::tracer {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(FlushSettle, NothingRecordedNeverWaits) {
  EXPECT_EQ(forcedFlushWaitNs(5 * kMs, 0), 0);
  EXPECT_EQ(forcedFlushWaitNs(0, 0), 0);
}

TEST(FlushSettle, WaitsUntilTheRecordsHaveBeenOnLongEnough) {
  const int64_t on = 1000 * kMs;
  EXPECT_EQ(forcedFlushWaitNs(on + 100 * kMs, on), 150 * kMs);
  EXPECT_EQ(forcedFlushWaitNs(on + 249 * kMs, on), 1 * kMs);
  EXPECT_EQ(forcedFlushWaitNs(on + 250 * kMs, on), 0);
  EXPECT_EQ(forcedFlushWaitNs(on + 10'000 * kMs, on), 0);
}

TEST(FlushSettle, NeverWaitsLongerThanTheCap) {
  const int64_t on = 1000 * kMs;
  EXPECT_EQ(forcedFlushWaitNs(on, on), 250 * kMs);
  // A clock read before the records went on (another thread's stale `now`) still waits the cap only.
  EXPECT_EQ(forcedFlushWaitNs(on - 500 * kMs, on), 250 * kMs);
  FlushSettle s{.min_recording_ns = 400 * kMs, .max_wait_ns = 30 * kMs};
  EXPECT_EQ(forcedFlushWaitNs(on + 100 * kMs, on, s), 30 * kMs);
  s.max_wait_ns = -5;  // a nonsense cap waits nothing rather than misbehaving
  EXPECT_EQ(forcedFlushWaitNs(on + 100 * kMs, on, s), 0);
}

TEST(FlushSettle, RandomInstantsGetTheWaitTheyNeedAndNoMore) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> t(1, 2000 * kMs);
  std::uniform_int_distribution<int64_t> setting(0, 600 * kMs);
  int waited = 0, capped = 0;
  for (int i = 0; i < 100'000; ++i) {
    const FlushSettle s{.min_recording_ns = setting(rng), .max_wait_ns = setting(rng)};
    const int64_t on = t(rng), now = on + t(rng) / 4 - 100 * kMs;
    const int64_t w = forcedFlushWaitNs(now, on, s);
    ASSERT_GE(w, 0);
    ASSERT_LE(w, s.max_wait_ns);
    const int64_t flush_at = now + w;
    if (w < s.max_wait_ns) {
      ASSERT_GE(flush_at - on, s.min_recording_ns) << "now " << now << " on " << on << " wait " << w;
    } else if (w > 0) {
      ++capped;
    }
    if (w > 0) {
      ++waited;
      ASSERT_LT(flush_at - 1 - on, s.min_recording_ns) << "waited longer than needed: now " << now << " on " << on;
    }
  }
  // The random instants reach every branch: no wait, the exact wait, the cap.
  EXPECT_GT(waited, 0);
  EXPECT_LT(waited, 100'000);
  EXPECT_GT(capped, 0);
}

}  // namespace
}  // namespace detrace::tracer
