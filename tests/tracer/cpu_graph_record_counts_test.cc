// GraphRecordCounts: an executable graph's records per launch followed through its nodes being
// disabled and enabled again (cuGraphNodeSetEnabled) and its updates (cuGraphExecUpdate).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "detrace/tracer/graph_record_counts.h"

namespace detrace::tracer {
namespace {

TEST(GraphRecordCounts, DisabledNodesGiveNoRecordsUntilEnabledAgain) {
  GraphRecordCounts counts;
  counts.instantiated(0x10, 5);
  EXPECT_EQ(counts.expected(0x10), 5);
  counts.nodeEnabled(0x10, /*gives_record=*/true, /*was_known=*/true, /*was=*/true, /*now=*/false);
  EXPECT_EQ(counts.expected(0x10), 4);
  counts.nodeEnabled(0x10, true, true, false, false);  // disabled again: no change
  EXPECT_EQ(counts.expected(0x10), 4);
  counts.nodeEnabled(0x10, true, true, true, false);  // another node
  EXPECT_EQ(counts.expected(0x10), 3);
  counts.nodeEnabled(0x10, true, true, false, true);
  EXPECT_EQ(counts.expected(0x10), 4);
  counts.nodeEnabled(0x10, /*gives_record=*/false, true, true, false);  // no record either way
  EXPECT_EQ(counts.expected(0x10), 4);
  EXPECT_EQ(counts.expected(0x20), kRecordsUnknown) << "never instantiated";
  EXPECT_FALSE(counts.nodeEnabled(0x20, true, true, true, false)) << "not followed: the caller forgets it";
  EXPECT_EQ(counts.expected(0x20), kRecordsUnknown);
  EXPECT_TRUE(counts.nodeEnabled(0x10, false, true, true, false));
}

TEST(GraphRecordCounts, WhatCannotBeFollowedHoldsNoCount) {
  GraphRecordCounts counts;
  counts.instantiated(1, 3);
  counts.nodeEnabled(1, true, /*was_known=*/false, true, false);
  EXPECT_EQ(counts.expected(1), kRecordsVary) << "its state before the call could not be read";

  counts.instantiated(2, 3);
  counts.nodeEnabled(2, true, true, /*was=*/false, /*now=*/true);
  EXPECT_EQ(counts.expected(2), kRecordsVary) << "disabled before it was watched: 3 was too many";

  counts.instantiated(3, kRecordsUnknown);
  counts.nodeEnabled(3, true, true, true, false);
  EXPECT_EQ(counts.expected(3), kRecordsVary) << "a count learnt from a launch no longer holds";

  counts.instantiated(4, kRecordsVary);
  counts.nodeEnabled(4, true, true, true, false);
  counts.nodeEnabled(4, true, true, false, true);
  EXPECT_EQ(counts.expected(4), kRecordsVary);
}

TEST(GraphRecordCounts, AnUpdateKeepsTheCountUnlessNodesWereDisabled) {
  GraphRecordCounts counts;
  counts.instantiated(1, 6);
  counts.updated(1);
  EXPECT_EQ(counts.expected(1), 6);
  counts.nodeEnabled(1, true, true, true, false);
  counts.nodeEnabled(1, true, true, false, true);
  counts.updated(1);
  EXPECT_EQ(counts.expected(1), 6) << "every node enabled again before the update";
  counts.nodeEnabled(1, true, true, true, false);
  counts.updated(1);
  EXPECT_EQ(counts.expected(1), kRecordsVary);
}

TEST(GraphRecordCounts, ADestroyedGraphsAddressStartsAfresh) {
  GraphRecordCounts counts;
  counts.instantiated(7, 4);
  counts.nodeEnabled(7, true, true, true, false);
  counts.forget(7);
  EXPECT_EQ(counts.expected(7), kRecordsUnknown);
  counts.instantiated(7, 2);
  EXPECT_EQ(counts.expected(7), 2);
  counts.nodeEnabled(7, true, true, false, true);
  EXPECT_EQ(counts.expected(7), kRecordsVary) << "the old graph's disabled node is not this one's";
}

TEST(GraphRecordCounts, BoundedByTheGraphsAlive) {
  GraphRecordCounts counts(/*max_graphs=*/2);
  counts.instantiated(1, 1);
  counts.instantiated(2, 2);
  counts.instantiated(3, 3);
  EXPECT_EQ(counts.expected(3), kRecordsUnknown) << "past the bound";
  EXPECT_FALSE(counts.nodeEnabled(3, true, true, true, false)) << "past the bound: not followed";
  counts.instantiated(2, 5);  // one already there may change
  EXPECT_EQ(counts.expected(2), 5);
  counts.forget(1);
  counts.instantiated(3, 3);
  EXPECT_EQ(counts.expected(3), 3);
}

// Random toggles of a graph's nodes: the count is always the number of enabled nodes that give a
// record, as a model that knows every node's state says.
TEST(GraphRecordCounts, RandomTogglesMatchAModel) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    std::vector<bool> enabled(static_cast<size_t>(n), true), gives(static_cast<size_t>(n));
    int32_t total = 0;
    for (int i = 0; i < n; ++i) total += (gives[static_cast<size_t>(i)] = rng() % 4 != 0) ? 1 : 0;
    GraphRecordCounts counts;
    counts.instantiated(42, total);
    for (int step = 0; step < 40; ++step) {
      const size_t i = rng() % static_cast<size_t>(n);
      const bool now = rng() % 2 == 0;
      counts.nodeEnabled(42, gives[i], true, enabled[i], now);
      enabled[i] = now;
      int32_t model = 0;
      for (int j = 0; j < n; ++j) model += enabled[static_cast<size_t>(j)] && gives[static_cast<size_t>(j)] ? 1 : 0;
      ASSERT_EQ(counts.expected(42), model) << "trial " << trial << " step " << step;
    }
  }
}

// Nodes the program disabled before the first start (the callbacks were off): their state is read
// when following begins, from the graphs whose nodes can still be named.
TEST(GraphRecordCounts, NodesDisabledBeforeFollowingAreReadWhenItBegins) {
  GraphRecordCounts counts;
  EXPECT_FALSE(counts.following());
  counts.instantiated(1, 5);
  counts.rememberNodes(1, /*graph=*/0xa, {11, 12, 13});
  counts.instantiated(2, 3);
  counts.rememberNodes(2, /*graph=*/0xb, {21});
  counts.graphDestroyed(0xb);  // its nodes cannot be named any more: nothing to read
  counts.instantiated(3, 2);
  counts.rememberNodes(3, /*graph=*/0xc, {31, 32});
  std::set<uint64_t> asked;
  counts.startFollowing([&](uint64_t exec, uint64_t node) {
    asked.insert(node);
    if (exec == 3) return -1;  // unreadable: the count stays as it was
    return node == 12 || node == 21 ? 1 : 0;
  });
  EXPECT_TRUE(counts.following());
  EXPECT_EQ(asked, (std::set<uint64_t>{11, 12, 13, 31, 32}));
  EXPECT_EQ(counts.expected(1), 4) << "node 12 was disabled before the first start";
  EXPECT_EQ(counts.expected(2), 3);
  EXPECT_EQ(counts.expected(3), 2);
  counts.nodeEnabled(1, true, true, /*was=*/false, /*now=*/true);
  EXPECT_EQ(counts.expected(1), 5) << "enabled again: a count, not kRecordsVary";
  counts.instantiated(4, 2);
  counts.rememberNodes(4, 0xd, {41});
  asked.clear();
  counts.startFollowing([&](uint64_t, uint64_t node) {
    asked.insert(node);
    return 1;
  });
  EXPECT_TRUE(asked.empty()) << "nothing is kept once following has begun";
  EXPECT_EQ(counts.expected(4), 2);
}

TEST(GraphRecordCounts, WhatChangesWhileTheNodesAreReadHoldsNoStaleCount) {
  GraphRecordCounts counts;
  counts.instantiated(1, 4);
  counts.rememberNodes(1, 0xa, {11, 12});
  counts.instantiated(2, 4);
  counts.rememberNodes(2, 0xb, {21});
  counts.instantiated(3, 4);
  counts.rememberNodes(3, 0xc, {31});
  // Seen by the callbacks (on before the reading) and read again: counted once.
  counts.nodeEnabled(3, true, true, true, false);
  counts.startFollowing([&](uint64_t exec, uint64_t) {
    if (exec == 1) counts.nodeEnabled(1, true, true, true, false);  // a call during the reading
    if (exec == 2) {  // destroyed and another graph made at its address
      counts.forget(2);
      counts.instantiated(2, 7);
    }
    return 1;
  });
  EXPECT_EQ(counts.expected(1), kRecordsVary);
  EXPECT_EQ(counts.expected(2), 7) << "the new graph at the address keeps its own count";
  EXPECT_EQ(counts.expected(3), 3) << "one disabled node, not two";
}

TEST(GraphRecordCounts, RememberedNodesAreBounded) {
  GraphRecordCounts counts;
  counts.instantiated(1, 1);
  counts.rememberNodes(1, 0xa, std::vector<uint64_t>(GraphRecordCounts::kMaxRememberedNodes, 5));
  counts.instantiated(2, 1);
  counts.rememberNodes(2, 0xb, {6});  // past the bound: not kept
  counts.forget(1);                   // gives its room back
  counts.instantiated(3, 1);
  counts.rememberNodes(3, 0xc, {7});
  std::set<uint64_t> asked;
  counts.startFollowing([&](uint64_t, uint64_t node) {
    asked.insert(node);
    return 1;
  });
  EXPECT_EQ(asked, (std::set<uint64_t>{7}));
  EXPECT_EQ(counts.expected(2), 1);
  EXPECT_EQ(counts.expected(3), 0);
}

// Random toggles before and after following begins, some made while nobody watched: once it has
// begun, the count is the model's whenever the nodes' graph was still alive at the start.
TEST(GraphRecordCounts, TogglesBeforeTheStartMatchAModel) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 12;
    std::vector<bool> enabled(n, true);
    GraphRecordCounts counts;
    counts.instantiated(42, static_cast<int32_t>(n));
    std::vector<uint64_t> nodes(n);
    for (size_t i = 0; i < n; ++i) nodes[i] = 100 + i;
    counts.rememberNodes(42, 0xa, nodes);
    for (int step = 0; step < 10; ++step) enabled[rng() % n] = rng() % 2 == 0;  // unseen
    counts.startFollowing([&](uint64_t, uint64_t node) { return enabled[node - 100] ? 0 : 1; });
    for (int step = 0; step < 20; ++step) {
      const size_t i = rng() % n;
      const bool now = rng() % 2 == 0;
      counts.nodeEnabled(42, true, true, enabled[i], now);
      enabled[i] = now;
      const auto model = static_cast<int32_t>(std::count(enabled.begin(), enabled.end(), true));
      ASSERT_EQ(counts.expected(42), model) << "trial " << trial << " step " << step;
    }
  }
}

}  // namespace
}  // namespace detrace::tracer
