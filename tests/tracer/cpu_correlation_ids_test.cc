// CUPTI's 32-bit correlation ids unwrapped to 64 bits (correlation_ids.h): across the wrap at
// 2^32, with records arriving out of order and from several threads, every id comes back as the
// call's true number.
#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "detrace/tracer/correlation_ids.h"

namespace detrace::tracer {
namespace {

constexpr uint64_t kWrap = uint64_t{1} << 32;

// True call numbers from `first`, increasing by 1 to 64 at random, `n` of them. Those whose low
// 32 bits are 0 are left out: 0 means "no correlation" (one call in 2^32 loses its id).
std::vector<uint64_t> calls(uint64_t first, size_t n, std::mt19937_64& rng) {
  std::vector<uint64_t> out;
  uint64_t id = first;
  while (out.size() < n) {
    if (static_cast<uint32_t>(id) != 0) out.push_back(id);
    id += 1 + rng() % 64;
  }
  return out;
}

TEST(CorrelationIds, SmallIdsAndNoneAreThemselves) {
  CorrelationUnwrapper u;
  EXPECT_EQ(u.unwrap(0), 0u) << "0 means no correlation";
  EXPECT_EQ(u.unwrap(1), 1u);
  EXPECT_EQ(u.unwrap(3'000'000'000u), 3'000'000'000u) << "a first id above 2^31 is not a wrapped one";
  EXPECT_EQ(u.unwrap(2'999'000'000u), 2'999'000'000u) << "a late id, below the mark, before any wrap";
}

// Ids around two wraps, each delivered up to ~2^20 calls late (records come late and out of
// order across streams): every one unwraps to its true number.
TEST(CorrelationIds, IdsAcrossTheWrapKeepTheirOrderWhenLateAndShuffled) {
  std::mt19937_64 rng(std::random_device{}());
  CorrelationUnwrapper u;
  std::vector<uint64_t> truth = calls(kWrap - 3'000'000, 200'000, rng);  // past 2^32, ~6.5M calls
  std::vector<uint64_t> more = calls(2 * kWrap - 1'000'000, 100'000, rng);
  // Bring the mark near the second stretch as calls in between would (every 2^24 calls or so).
  for (uint64_t id = truth.back(); id < more.front(); id += uint64_t{1} << 24) {
    (void)u.unwrap(static_cast<uint32_t>(id));
  }
  for (std::vector<uint64_t>* ids : {&truth, &more}) {
    // Shuffle within windows of 4096 ids (up to ~2^18 calls apart).
    for (size_t at = 0; at < ids->size(); at += 4096) {
      std::shuffle(ids->begin() + at, ids->begin() + std::min(ids->size(), at + 4096), rng);
    }
  }
  CorrelationUnwrapper fresh;
  for (uint64_t id : truth) {
    ASSERT_EQ(fresh.unwrap(static_cast<uint32_t>(id)), id) << "true id " << id;
  }
  for (uint64_t id = truth.back(); id < more.front(); id += uint64_t{1} << 24) {
    (void)fresh.unwrap(static_cast<uint32_t>(id));
  }
  for (uint64_t id : more) {
    ASSERT_EQ(fresh.unwrap(static_cast<uint32_t>(id)), id) << "true id " << id;
  }
}

// Threads take turns at consecutive calls (the ids interleave) while crossing the wrap.
TEST(CorrelationIds, ThreadsUnwrappingAtOnceAgree) {
  CorrelationUnwrapper u;
  (void)u.unwrap(static_cast<uint32_t>(kWrap - 4'000'000));
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 2'000'000;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t id = kWrap - 4'000'000 + i * kThreads + static_cast<uint64_t>(t);
        if (static_cast<uint32_t>(id) != 0) wrong[t] += u.unwrap(static_cast<uint32_t>(id)) != id;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace detrace::tracer
