// WeightSampler (weight_sampling.h): which replays of an executable graph digest their weights
// under --graph-weights-every N, and which sampled replay the others carry them from. Fixed
// cases, then random sequences of replays and capture starts checked against what the rule
// promises.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "detrace/tracer/weight_sampling.h"

namespace detrace::tracer {
namespace {

TEST(WeightSampling, EveryNthReplayFromTheFirst) {
  WeightSampler s;
  const int64_t want_from[] = {0, 0, 0, 3, 3, 3, 6};
  for (int64_t i = 0; i < 7; ++i) {
    const WeightSampler::Turn t = s.next(1, 3);
    EXPECT_EQ(t.sample, i);
    EXPECT_EQ(t.weights_from, want_from[i]) << "replay " << i;
    EXPECT_EQ(t.sampled(), i % 3 == 0) << "replay " << i;
  }
}

TEST(WeightSampling, EveryReplayWhenNIsOneOrLess) {
  for (int64_t every : {1, 0, -4}) {
    WeightSampler s;
    for (int64_t i = 0; i < 5; ++i) {
      const WeightSampler::Turn t = s.next(1, every);
      EXPECT_TRUE(t.sampled()) << "every " << every << ", replay " << i;
      EXPECT_EQ(t.weights_from, i);
    }
  }
}

TEST(WeightSampling, ACaptureStartSamplesTheNextReplayAndCountsFromIt) {
  WeightSampler s;
  EXPECT_TRUE(s.next(1, 4).sampled());             // 0
  EXPECT_FALSE(s.next(1, 4).sampled());            // 1 carries from 0
  const WeightSampler::Turn after = s.next(2, 4);  // attach start in between: 2 is sampled
  EXPECT_EQ(after.sample, 2);
  EXPECT_TRUE(after.sampled());
  EXPECT_EQ(s.next(2, 4).weights_from, 2);  // 3
  EXPECT_EQ(s.next(2, 4).weights_from, 2);  // 4
  EXPECT_EQ(s.next(2, 4).weights_from, 2);  // 5
  EXPECT_TRUE(s.next(2, 4).sampled());      // 6 = 2 + 4
}

TEST(WeightSampling, RandomSequencesCarryFromAnEarlierSampleOfTheSameCapture) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int run = 0; run < 200; ++run) {
    const int64_t every = std::uniform_int_distribution<int64_t>(1, 20)(rng);
    WeightSampler s;
    uint64_t starts = 1;
    int64_t start_at = 0, last_sampled = -1;
    for (int64_t i = 0; i < 500; ++i) {
      if (std::uniform_int_distribution<int>(0, 49)(rng) == 0) {
        ++starts;
        start_at = i;
      }
      const WeightSampler::Turn t = s.next(starts, every);
      ASSERT_EQ(t.sample, i);
      // Sampled exactly at start_at, start_at + every, ...; the others carry from the latest of
      // those, which was handed out before them.
      ASSERT_EQ(t.sampled(), (i - start_at) % every == 0) << "replay " << i << ", every " << every;
      if (t.sampled()) last_sampled = i;
      ASSERT_EQ(t.weights_from, last_sampled) << "replay " << i;
      ASSERT_GE(t.weights_from, start_at);
      ASSERT_LT(i - t.weights_from, every);
    }
  }
}

}  // namespace
}  // namespace detrace::tracer
