// LruMap (lru_map.h): a bounded map that forgets its least recently used entry, checked against a
// plain model on random traffic, and on the pattern that made it: more problems than fit, cycled.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "detrace/tracer/lru_map.h"

namespace detrace::tracer {
namespace {

TEST(LruMap, KeepsTheMostRecentlyUsedAndForgetsTheOldest) {
  LruMap<int, int> m(3);
  m.put(1, 10);
  m.put(2, 20);
  m.put(3, 30);
  ASSERT_NE(m.find(1), nullptr);  // 1 is now the most recent: 2 is the oldest
  m.put(4, 40);
  EXPECT_EQ(m.find(2), nullptr) << "the least recently used went";
  EXPECT_EQ(*m.find(1), 10);
  EXPECT_EQ(*m.find(3), 30);
  EXPECT_EQ(*m.find(4), 40);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.evicted(), 1);
  m.put(3, 33);  // an update is a use, not an insertion
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(*m.find(3), 33);
  m.put(5, 50);  // 1 was used before 4 and 3: it goes
  EXPECT_EQ(m.find(1), nullptr);
  EXPECT_EQ(m.evicted(), 2);
}

// Random gets and puts against a model (a vector of keys, most recent first).
TEST(LruMap, MatchesAModelOnRandomTraffic) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const size_t capacity = 1 + rng() % 16;
  LruMap<int, int> m(capacity);
  std::vector<std::pair<int, int>> model;  // most recent first
  for (int step = 0; step < 20000; ++step) {
    const int key = static_cast<int>(rng() % 40);
    auto at = std::find_if(model.begin(), model.end(), [&](const auto& e) { return e.first == key; });
    if (rng() % 2 == 0) {
      const int* got = m.find(key);
      ASSERT_EQ(got != nullptr, at != model.end()) << "key " << key << " at step " << step;
      if (got == nullptr) continue;
      ASSERT_EQ(*got, at->second);
      std::rotate(model.begin(), at, at + 1);
    } else {
      const int value = static_cast<int>(rng());
      m.put(key, value);
      if (at != model.end()) model.erase(at);
      model.insert(model.begin(), {key, value});
      if (model.size() > capacity) model.pop_back();
    }
    ASSERT_EQ(m.size(), model.size());
  }
}

// What the heuristic cache met: more problems than fit, asked over and over (a server's token
// counts). The ones asked lately are answered from memory; an insert-only cache that stopped at
// its size answered none of the later ones, at every pass.
TEST(LruMap, ProblemsAskedLatelyStayWhenMoreComeThanFit) {
  using Key = std::array<int64_t, 36>;
  LruMap<Key, int> m(100);
  auto key = [](int64_t tokens) {
    Key k{};
    k[0] = tokens;
    return k;
  };
  for (int64_t t = 0; t < 1000; ++t) m.put(key(t), static_cast<int>(t));  // a first sweep
  int answered = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (int64_t t = 950; t < 1000; ++t) answered += m.find(key(t)) != nullptr ? 1 : 0;  // the latest 50
  }
  EXPECT_EQ(answered, 150);
  EXPECT_EQ(m.size(), 100u);
  EXPECT_EQ(m.evicted(), 900);
}

}  // namespace
}  // namespace detrace::tracer
