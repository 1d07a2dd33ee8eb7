// forcedFlushWaitNs (flush_settle.h): how long a forced CUPTI flush waits for the records to
// settle. Fixed cases for each rule, then random instants checked against what the wait promises.
#include <gtest/gtest.h>

#include <random>

#include "detrace/tracer/flush_settle.h"

namespace detrace::tracer {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(FlushSettle, NothingRecordedNeverWaits) {
  EXPECT_EQ(forcedFlushWaitNs(5 * kMs, 0, 4 * kMs), 0);
  EXPECT_EQ(forcedFlushWaitNs(5 * kMs, 0, 0), 0);
}

TEST(FlushSettle, WaitsUntilTheRecordsHaveBeenOnLongEnough) {
  const int64_t on = 1000 * kMs;
  EXPECT_EQ(forcedFlushWaitNs(on + 100 * kMs, on, 0), 150 * kMs);
  EXPECT_EQ(forcedFlushWaitNs(on + 249 * kMs, on, 0), 1 * kMs);
  EXPECT_EQ(forcedFlushWaitNs(on + 250 * kMs, on, 0), 0);
  EXPECT_EQ(forcedFlushWaitNs(on + 10'000 * kMs, on, 0), 0);
}

TEST(FlushSettle, WaitsUntilTheContextIsOldEnough) {
  const int64_t on = 1000 * kMs, now = on + 5000 * kMs;
  EXPECT_EQ(forcedFlushWaitNs(now, on, now - 5 * kMs), 15 * kMs);
  EXPECT_EQ(forcedFlushWaitNs(now, on, now - 20 * kMs), 0);
  // Both rules: the later of the two instants.
  EXPECT_EQ(forcedFlushWaitNs(on + 100 * kMs, on, on + 95 * kMs), 150 * kMs);
  EXPECT_EQ(forcedFlushWaitNs(on + 240 * kMs, on, on + 239 * kMs), 19 * kMs);
}

TEST(FlushSettle, NeverWaitsLongerThanTheCap) {
  const int64_t on = 1000 * kMs;
  EXPECT_EQ(forcedFlushWaitNs(on, on, 0), 250 * kMs);
  // A clock read before the records went on (another thread's stale `now`) still waits the cap only.
  EXPECT_EQ(forcedFlushWaitNs(on - 500 * kMs, on, 0), 250 * kMs);
  FlushSettle s{.min_recording_ns = 400 * kMs, .min_context_ns = 20 * kMs, .max_wait_ns = 30 * kMs};
  EXPECT_EQ(forcedFlushWaitNs(on + 100 * kMs, on, 0, s), 30 * kMs);
}

TEST(FlushSettle, RandomInstantsGetTheWaitTheyNeedAndNoMore) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> t(1, 2000 * kMs);
  int waited = 0;
  for (int i = 0; i < 100'000; ++i) {
    const FlushSettle s;
    const int64_t on = t(rng), now = on + t(rng) / 4, created = (i % 3 == 0) ? 0 : on + t(rng) / 8;
    const int64_t w = forcedFlushWaitNs(now, on, created, s);
    ASSERT_GE(w, 0);
    ASSERT_LE(w, s.max_wait_ns);
    const int64_t flush_at = now + w;
    const bool settled = flush_at - on >= s.min_recording_ns && (created == 0 || flush_at - created >= s.min_context_ns);
    if (w < s.max_wait_ns) {
      ASSERT_TRUE(settled) << "now " << now << " on " << on << " created " << created << " wait " << w;
    }
    if (w > 0) {
      ++waited;
      // One nanosecond sooner would have been too soon.
      const int64_t sooner = flush_at - 1;
      ASSERT_FALSE(sooner - on >= s.min_recording_ns && (created == 0 || sooner - created >= s.min_context_ns));
    }
  }
  EXPECT_GT(waited, 0);  // the random instants reach both branches
  EXPECT_LT(waited, 100'000);
}

}  // namespace
}  // namespace detrace::tracer
