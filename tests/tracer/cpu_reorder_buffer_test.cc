// The tracer's ordering logic, driven by fake launch, activity and library-op streams (no CUPTI,
// no GPU): events come out in API order with their GPU data, graphs expand in GPU order, stale
// slots time out, and a full buffer forces its oldest slot out, all counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <atomic>
#include <array>
#include <span>
#include <vector>

#include "detrace/tracer/comm_registry.h"
#include "detrace/tracer/reorder_buffer.h"
#include "fake_sink.h"
#include "reorder_fakes.h"

namespace detrace::tracer {
namespace {

using db::EventKind;

using testing::FakeSink;
using testing::gemm;
using testing::kernel;
using testing::launch;

TEST(ReorderBuffer, OutOfOrderActivitiesComeOutInLaunchOrder) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  for (uint64_t c = 1; c <= 50; ++c) rb.addLaunch(launch(c, 100 + static_cast<int64_t>(c)));
  std::vector<uint64_t> order(50);
  for (uint64_t i = 0; i < 50; ++i) order[i] = i + 1;
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  for (uint64_t c : order) rb.addActivity(kernel(c, 1000 + static_cast<int64_t>(c) * 20));
  ASSERT_EQ(sink.rows.size(), 50u);
  EXPECT_EQ(rb.pending(), 0u);
  for (size_t i = 0; i < 50; ++i) {
    const db::Event& e = sink.rows[i].e;
    EXPECT_EQ(e.correlation_id, static_cast<int64_t>(i + 1));
    EXPECT_EQ(e.cpu_ns, static_cast<int64_t>(101 + i));
    EXPECT_EQ(e.gpu_start_ns, 1000 + static_cast<int64_t>(i + 1) * 20);
    EXPECT_EQ(e.launch.grid[0], 4);
    EXPECT_EQ(e.launch.api, db::LaunchApi::kRuntime);  // the API's, not the record's
    EXPECT_EQ(e.stream, 1);
  }
  EXPECT_EQ(rb.stats().matched, 50);
}

TEST(ReorderBuffer, IncompleteHeadHoldsBackLaterSlots) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  rb.addLaunch(launch(1, 10));
  rb.addLaunch(launch(2, 11));
  rb.addActivity(kernel(2, 500));
  EXPECT_TRUE(sink.rows.empty());
  rb.addActivity(kernel(1, 400));
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[0].e.correlation_id, 1);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 2);
}

TEST(ReorderBuffer, LibraryOpsInterleaveAndParentTheirKernels) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  rb.addLaunch(launch(1, 10));              // a plain kernel before the GEMM
  uint64_t g = rb.addLibraryOp(gemm(11));   // complete at once, but behind the kernel
  EXPECT_TRUE(sink.rows.empty());
  rb.addLaunch(launch(2, 12), g);           // the GEMM's kernel
  rb.addLaunch(launch(3, 13), g);
  rb.addActivity(kernel(3, 300));
  rb.addActivity(kernel(2, 200));
  rb.addActivity(kernel(1, 100));
  ASSERT_EQ(sink.rows.size(), 4u);
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kKernel);
  EXPECT_TRUE(sink.rows[1].gemm.has_value());
  EXPECT_EQ(sink.rows[2].e.parent_seq, 1);
  EXPECT_EQ(sink.rows[3].e.parent_seq, 1);
  EXPECT_EQ(sink.rows[0].e.parent_seq, db::kUnset);
  EXPECT_EQ(rb.seqOf(g), 1);
}

TEST(ReorderBuffer, PendingCollectiveWaitsForNcclsChoiceThenTimesOut) {
  FakeSink sink;
  ReorderOptions options;
  options.timeout_ns = 1000;
  ReorderBuffer rb(sink, options);
  LibraryOp op;
  op.event.kind = EventKind::kCollective;
  op.event.cpu_ns = 10;
  op.detail = db::Collective{};
  uint64_t c = rb.addLibraryOp(op, 0, /*complete=*/false);
  uint64_t k = rb.addLaunch(launch(1, 11), c);  // its kernel
  rb.addActivity(kernel(1, 100));
  EXPECT_TRUE(sink.rows.empty()) << "the collective waits for its choices, and holds its kernel";
  EXPECT_TRUE(rb.completeLibraryOp(c, [](LibraryOp& o) { std::get<db::Collective>(o.detail).channels = 4; }));
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[0].coll->channels, 4);
  EXPECT_EQ(sink.rows[1].e.parent_seq, 0);
  EXPECT_EQ(rb.seqOf(k), 1);
  EXPECT_FALSE(rb.completeLibraryOp(c)) << "already written";
  // A choice that never comes: written as it is after the timeout.
  uint64_t d = rb.addLibraryOp(op, 0, false);
  rb.poll(op.event.cpu_ns + 2000);
  ASSERT_EQ(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows[2].coll->channels, -1);
  EXPECT_EQ(rb.stats().timed_out, 1);
  EXPECT_FALSE(rb.completeLibraryOp(d));
}

std::vector<std::pair<uint64_t, int64_t>> g_written;

TEST(ReorderBuffer, TellsTheSeqOfMarkedLaunchesAndLibraryOps) {
  g_written.clear();
  FakeSink sink;
  ReorderOptions o;
  o.on_written = [](uint64_t token, int64_t seq) { g_written.emplace_back(token, seq); };
  ReorderBuffer rb(sink, o);
  ApiLaunch plain = launch(1, 1);
  ApiLaunch marked = launch(2, 1);
  marked.notify_written = true;
  uint64_t t_plain = rb.addLaunch(plain);
  uint64_t t_marked = rb.addLaunch(marked);
  rb.addActivity(kernel(2, 20));
  rb.addActivity(kernel(1, 10));
  ASSERT_EQ(sink.rows.size(), 2u);
  ASSERT_EQ(g_written.size(), 1u);  // the plain launch is not reported
  EXPECT_EQ(g_written[0].first, t_marked);
  EXPECT_EQ(g_written[0].second, 1);
  EXPECT_NE(t_plain, t_marked);
}

// A library op that never ran (a call in an NCCL group that was only simulated) is discarded
// while it waits: it takes no sequence number, holds nothing back, and its fingerprints hear
// kSeqDiscarded; an op already written cannot be discarded.
TEST(ReorderBuffer, ADiscardedLibraryOpIsNeverWritten) {
  g_written.clear();
  FakeSink sink;
  ReorderOptions o;
  o.on_written = [](uint64_t token, int64_t seq) { g_written.emplace_back(token, seq); };
  ReorderBuffer rb(sink, o);
  LibraryOp op;
  op.event.kind = EventKind::kCollective;
  op.event.cpu_ns = 10;
  op.detail = db::Collective{};
  const uint64_t first = rb.addLibraryOp(op, 0, /*complete=*/false);
  const uint64_t simulated = rb.addLibraryOp(op, 0, /*complete=*/false);
  const uint64_t after = rb.addLaunch(launch(1, 12));
  rb.addActivity(kernel(1, 100));
  EXPECT_TRUE(sink.rows.empty()) << "everything waits behind the first op's choices";
  EXPECT_TRUE(rb.discardLibraryOp(simulated));
  EXPECT_TRUE(sink.rows.empty()) << "the first op still waits";
  EXPECT_TRUE(rb.completeLibraryOp(first));
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_TRUE(sink.rows[0].coll.has_value());
  EXPECT_FALSE(sink.rows[1].coll.has_value());
  EXPECT_EQ(rb.seqOf(first), 0);
  EXPECT_EQ(rb.seqOf(after), 1) << "the discarded op took no number";
  EXPECT_FALSE(rb.seqOf(simulated).has_value());
  EXPECT_EQ(rb.stats().discarded_ops, 1);
  ASSERT_EQ(g_written.size(), 2u);  // library ops are always reported
  EXPECT_EQ(g_written[0], std::make_pair(first, int64_t{0}));
  EXPECT_EQ(g_written[1], std::make_pair(simulated, kSeqDiscarded));
  EXPECT_FALSE(rb.discardLibraryOp(first)) << "already written";
  EXPECT_FALSE(rb.discardLibraryOp(simulated)) << "already gone";
  EXPECT_EQ(rb.stats().discarded_ops, 1);
}

TEST(ReorderBuffer, TheTracersOwnMemsetsNeverBecomeEvents) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  auto memset = [](uint64_t corr) {
    Activity m;
    m.correlation_id = corr;
    m.kind = db::EventKind::kMemset;
    m.gpu_start_ns = 1;
    return m;
  };
  // A memset made inside a kernel launch's callback carries the launch's correlation id: it must
  // neither complete the slot nor take the kernel's place.
  rb.addLaunch(launch(1, 1));
  rb.addActivity(memset(1));
  EXPECT_TRUE(sink.rows.empty());
  rb.addActivity(kernel(1, 50));
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.kind, db::EventKind::kKernel);
  // A memset the tracer made elsewhere (deep mode's zero fill) is named by its correlation id.
  rb.ignoreCorrelation(7, 0);
  rb.addActivity(memset(7));
  rb.addActivity(memset(8));  // the program's own: written on arrival
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 8);
  EXPECT_EQ(rb.stats().own_records, 2);
}

TEST(ReorderBuffer, AnOwnCallWhoseRecordNeverCameIsForgottenBeforeItsIdComesBack) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  auto memset = [](uint64_t corr, int64_t start) {
    Activity m;
    m.correlation_id = corr;
    m.kind = db::EventKind::kMemset;
    m.gpu_start_ns = start;
    return m;
  };
  // The tracer's own call 7 at t = 1 s never gets its record (records were off). Much later,
  // after CUPTI's 32-bit ids wrapped, a program memset carries id 7 again: it is the program's.
  const int64_t s = 1'000'000'000;
  rb.ignoreCorrelation(7, 1 * s);
  rb.ignoreCorrelation(9, 1 * s + ReorderBuffer::kIgnoreForNs);  // made later: still awaited
  rb.addActivity(memset(7, 2 * s + ReorderBuffer::kIgnoreForNs));
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.correlation_id, 7);
  rb.addActivity(memset(9, 2 * s + ReorderBuffer::kIgnoreForNs));  // within its time: the tracer's
  EXPECT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(rb.stats().own_records, 1);
  // Forgotten at a later ignore as well, not only at a record (the tracer's calls come in time
  // order).
  const int64_t t11 = 2 * s + ReorderBuffer::kIgnoreForNs;
  rb.ignoreCorrelation(11, t11);
  rb.ignoreCorrelation(12, t11 + ReorderBuffer::kIgnoreForNs + 1);
  rb.addActivity(memset(11, t11));  // as if its own record: it was forgotten at 12's ignore
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 11);
}

TEST(ReorderBuffer, DriverAliasFindsTheRuntimeSlot) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  uint64_t t = rb.addLaunch(launch(10, 1));
  rb.addAlias(t, 11);
  rb.addActivity(kernel(11, 5));
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.correlation_id, 10);
  EXPECT_EQ(sink.rows[0].e.gpu_start_ns, 5);
  // Counted apart (stats: whether GPU records carry the runtime's or the driver's id).
  uint64_t u = rb.addLaunch(launch(12, 2));
  rb.addAlias(u, 13);
  rb.addActivity(kernel(12, 6));
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(rb.stats().matched, 2);
  EXPECT_EQ(rb.stats().matched_by_alias, 1);
}

TEST(ReorderBuffer, GraphLaunchExpandsInGpuOrderAndLearnsItsSize) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  // First replay: expected count known (3 nodes).
  ApiLaunch g = launch(20, 100);
  g.is_graph = true;
  g.graph_key = 0xabc;
  g.api = db::LaunchApi::kGraph;
  g.expected_activities = 3;
  rb.addLaunch(g);
  rb.addLaunch(launch(21, 101));
  for (int64_t node : {2, 0, 1}) {
    Activity a = kernel(20, 1000 + node * 100);
    a.graph_id = 5;
    a.graph_node_id = node;
    rb.addActivity(a);
    if (node != 1) {
      EXPECT_TRUE(sink.rows.empty());
    }
  }
  ASSERT_EQ(sink.rows.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sink.rows[i].e.graph_node_id, i);
    EXPECT_EQ(sink.rows[i].e.graph_id, 5);
    EXPECT_EQ(sink.rows[i].e.correlation_id, 20);
    EXPECT_EQ(sink.rows[i].e.launch.api, db::LaunchApi::kGraph);
  }
  rb.addActivity(kernel(21, 2000));
  EXPECT_EQ(sink.rows.size(), 4u);

  // A graph of unknown size completes at the timeout; its size is remembered for the next launch.
  g.correlation_id = 30;
  g.graph_key = 0xdef;
  g.expected_activities = -1;
  g.cpu_ns = 200;
  rb.addLaunch(g);
  for (int64_t node : {0, 1}) {
    Activity a = kernel(30, 3000 + node);
    a.graph_id = 6;
    a.graph_node_id = node;
    rb.addActivity(a);
  }
  EXPECT_EQ(sink.rows.size(), 4u);
  rb.poll(200 + ReorderOptions{}.timeout_ns + 1);
  EXPECT_EQ(sink.rows.size(), 6u);
  EXPECT_EQ(rb.stats().timed_out, 1);
  g.correlation_id = 31;
  g.cpu_ns = 300;
  rb.addLaunch(g);
  for (int64_t node : {1, 0}) {
    Activity a = kernel(31, 4000 + node);
    a.graph_node_id = node;
    rb.addActivity(a);
  }
  EXPECT_EQ(sink.rows.size(), 8u);  // completed by count, no timeout
  EXPECT_EQ(rb.stats().timed_out, 1);
}

// A launch of the graph at 0xdef whose count is unknown gets 2 records and is written at its
// timeout; the graph is destroyed (forgetGraph) before that or after. Then a new graph made at
// that address gets 3 records: it must not be cut after 2, a count learnt from the old one.
void expectAGraphAtAForgottenAddressKeepsItsRecords(bool forget_while_waiting) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  ApiLaunch h = launch(30, 200);
  h.is_graph = true;
  h.graph_key = 0xdef;
  h.expected_activities = kRecordsUnknown;
  rb.addLaunch(h);
  for (int64_t start : {3000, 3001}) rb.addActivity(kernel(30, start));
  if (forget_while_waiting) rb.forgetGraph(0xdef);
  rb.poll(200 + ReorderOptions{}.timeout_ns + 1);
  ASSERT_EQ(rb.stats().timed_out, 1);
  if (!forget_while_waiting) rb.forgetGraph(0xdef);
  const size_t before = sink.rows.size();
  h.correlation_id = 31;
  h.cpu_ns = ReorderOptions{}.timeout_ns + 1000;
  rb.addLaunch(h);
  for (int64_t start : {9000, 9001, 9002}) rb.addActivity(kernel(31, start));
  EXPECT_EQ(sink.rows.size(), before) << "written before its third record came: the old graph's count was used";
  rb.flush();
  EXPECT_EQ(sink.rows.size(), before + 3);
  EXPECT_EQ(rb.stats().unmatched, 0);
}

// A graph with no kernel, copy or memset node (host or event nodes only, or empty) gives no
// record: its launch is complete when it is taken, and holds nothing behind it. A graph destroyed
// takes the record count learnt for its address with it (forgetGraph): a new graph made there
// learns its own.
TEST(ReorderBuffer, AGraphOfNoRecordsHoldsNothingBackAndAForgottenGraphsCountGoes) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  ApiLaunch g = launch(20, 100);
  g.is_graph = true;
  g.graph_key = 0xabc;
  g.expected_activities = 0;
  rb.addLaunch(g);
  rb.addLaunch(launch(21, 101));
  rb.addActivity(kernel(21, 500));
  EXPECT_EQ(sink.rows.size(), 2u) << "the kernel after the graph waited for it";
  EXPECT_EQ(rb.stats().timed_out, 0);
  expectAGraphAtAForgottenAddressKeepsItsRecords(/*forget_while_waiting=*/false);
}

// A graph destroyed while a launch of it still waits for its records (its count unknown): that
// launch, written at its timeout, learns nothing for the address, which a new graph may now have.
TEST(ReorderBuffer, AGraphForgottenWhileItsLaunchWaitsLeavesNoCountForItsAddress) {
  expectAGraphAtAForgottenAddressKeepsItsRecords(/*forget_while_waiting=*/true);
}

// A graph with conditional nodes (kRecordsVary: a while loop's body runs as often as the GPU
// decides) gives each launch its own number of records. No launch's count is learnt for the next:
// each launch keeps all its records, more or fewer than the launch before, and none is split off
// as a record with no slot (an orphan has no launch CPU time). Its kernels come 300 ms apart, so
// that with placement a launch's hold is over before its last records come. Both ways of placing.
TEST(ReorderBuffer, AGraphWhoseRecordCountVariesKeepsEveryLaunchsRecords) {
  constexpr int64_t kApart = 300'000'000;
  for (bool place : {false, true}) {
    SCOPED_TRACE(place ? "placed by correlation id" : "launch callbacks");
    FakeSink sink;
    ReorderOptions o;
    o.place_records = place;
    ReorderBuffer rb(sink, o);
    ApiLaunch g = launch(0, 0);
    g.is_graph = true;
    g.graph_key = 0xdef;
    g.api = db::LaunchApi::kGraph;
    g.expected_activities = kRecordsVary;
    int64_t now = 200;
    uint64_t corr = 30;
    for (int kernels : {2, 4, 1}) {  // the while loop's kernels at each launch
      const size_t before = sink.rows.size();
      g.correlation_id = corr;
      g.cpu_ns = now;
      rb.addLaunch(g);
      for (int node = 0; node < kernels; ++node) {
        Activity a = kernel(corr, now + 100 + node * kApart);
        a.graph_id = 6;
        a.graph_node_id = node;
        rb.addActivity(a);
      }
      now += o.timeout_ns + kernels * kApart + 1000;
      rb.poll(now);
      EXPECT_EQ(sink.rows.size(), before + static_cast<size_t>(kernels)) << "launch " << corr;
      for (size_t r = before; r < sink.rows.size(); ++r) {
        EXPECT_EQ(sink.rows[r].e.correlation_id, static_cast<int64_t>(corr));
        EXPECT_EQ(sink.rows[r].e.cpu_ns, g.cpu_ns) << "record " << r << " split off its launch";
        EXPECT_EQ(sink.rows[r].e.launch.api, db::LaunchApi::kGraph);
      }
      ++corr;
    }
    const ReorderStats s = rb.stats();
    EXPECT_EQ(s.unmatched, 0);
    EXPECT_EQ(s.placed, 0) << "records placed as if they had no slot";
    EXPECT_EQ(s.late, 0);
    EXPECT_EQ(s.timed_out, 3) << "each launch is written at its timeout";
  }
}

TEST(ReorderBuffer, TimeoutWritesWithoutGpuTimesAndLateRecordsAreCounted) {
  FakeSink sink;
  ReorderOptions o;
  o.timeout_ns = 1000;
  ReorderBuffer rb(sink, o);
  rb.addLaunch(launch(1, 100));
  rb.addLaunch(launch(2, 150));
  rb.poll(1000);  // not yet stale
  EXPECT_TRUE(sink.rows.empty());
  rb.poll(1120);  // slot 1 is stale, slot 2 not
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.gpu_start_ns, db::kUnset);
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kKernel);
  rb.addActivity(kernel(1, 5));  // too late
  EXPECT_EQ(rb.stats().late, 1);
  rb.addActivity(kernel(2, 6));
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[1].e.gpu_start_ns, 6);
  EXPECT_EQ(rb.stats().timed_out, 1);
}

// A record is late (dropped) when its slot is among the last max(4096, capacity) written without
// their records; older ones are forgotten, and their records are then written as records with no
// slot. (A buffer of 1024 slots: 4096 remembered.)
TEST(ReorderBuffer, LateRecordsAreRememberedForTheLast4096IncompleteSlots) {
  FakeSink sink;
  ReorderOptions o;
  o.capacity = 1024;
  ReorderBuffer rb(sink, o);
  rb.addLaunch(launch(1, 100));
  rb.flush();  // written without its record
  rb.addActivity(kernel(1, 5));
  EXPECT_EQ(rb.stats().late, 1);
  constexpr uint64_t kMore = 4096;
  for (uint64_t i = 0; i < kMore; ++i) rb.addLaunch(launch(1000 + i, 200));
  rb.flush();  // 4096 more (most overflowing the 1024 slots): slot 1 falls out of what is remembered
  EXPECT_EQ(rb.stats().flushed_incomplete + rb.stats().overflowed, static_cast<int64_t>(1 + kMore));
  const size_t rows = sink.rows.size();
  rb.addActivity(kernel(1, 6));  // forgotten: written, with no slot
  EXPECT_EQ(rb.stats().late, 1);
  EXPECT_EQ(rb.stats().unmatched, 1);
  ASSERT_EQ(sink.rows.size(), rows + 1);
  EXPECT_EQ(sink.rows.back().e.gpu_start_ns, 6);
  rb.addActivity(kernel(1000, 7));  // the oldest still remembered
  rb.addActivity(kernel(1000 + kMore - 1, 8));  // the newest
  EXPECT_EQ(rb.stats().late, 3);
  EXPECT_EQ(sink.rows.size(), rows + 1);
}

// A stall (the GPU waits seconds on a collective while the program launches on): every slot of
// a full buffer goes out without its record (overflow). When the GPU moves on, the records of
// all of them come, and each is late, not written a second time as a record with no slot.
TEST(ReorderBuffer, AfterAStallAsManyIncompleteSlotsAsTheBufferHoldsAreRemembered) {
  FakeSink sink;
  ReorderOptions o;
  o.capacity = 16384;
  ReorderBuffer rb(sink, o);
  constexpr uint64_t kLaunches = 3 * 16384;
  for (uint64_t i = 1; i <= kLaunches; ++i) rb.addLaunch(launch(i, 100));
  ASSERT_EQ(rb.stats().overflowed, static_cast<int64_t>(kLaunches - 16384));
  const size_t rows = sink.rows.size();
  // The records of the last 16384 overflowed slots, oldest first.
  for (uint64_t i = kLaunches - 2 * 16384 + 1; i <= kLaunches - 16384; ++i) rb.addActivity(kernel(i, 500));
  EXPECT_EQ(rb.stats().late, 16384);
  EXPECT_EQ(rb.stats().unmatched, 0) << "records of slots already written were written again";
  EXPECT_EQ(sink.rows.size(), rows);
}

TEST(ReorderBuffer, UnmatchedRecordsAreWrittenOnArrival) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  rb.addLaunch(launch(1, 10));
  Activity memcpy;
  memcpy.correlation_id = 99;
  memcpy.kind = EventKind::kMemcpy;
  memcpy.gpu_start_ns = 3;
  rb.addActivity(memcpy);
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kMemcpy);
  EXPECT_FALSE(sink.rows[0].e.has_launch);
  EXPECT_EQ(rb.stats().unmatched, 1);
  EXPECT_EQ(rb.pending(), 1u);
}

TEST(ReorderBuffer, OverflowForcesTheOldestOutAndFlushWritesTheRest) {
  FakeSink sink;
  ReorderOptions o;
  o.capacity = 8;
  ReorderBuffer rb(sink, o);
  for (uint64_t c = 1; c <= 20; ++c) rb.addLaunch(launch(c, static_cast<int64_t>(c)));
  EXPECT_EQ(rb.pending(), 8u);
  EXPECT_EQ(sink.rows.size(), 12u);
  EXPECT_EQ(rb.stats().overflowed, 12);
  rb.addActivity(kernel(15, 1));
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(sink.rows[i].e.correlation_id, static_cast<int64_t>(i + 1));
  EXPECT_EQ(sink.rows[14].e.gpu_start_ns, 1);
  EXPECT_EQ(rb.stats().flushed_incomplete, 7);
}

TEST(ReorderBuffer, FailedLaunchesAndSinkDropsAreCounted) {
  FakeSink sink;
  sink.capacity = 1;
  ReorderBuffer rb(sink);
  uint64_t t = rb.addLaunch(launch(1, 1));
  rb.launchFailed(t);
  EXPECT_EQ(sink.rows.size(), 1u);
  rb.addLibraryOp(gemm(2));
  EXPECT_EQ(rb.stats().failed_launches, 1);
  EXPECT_EQ(rb.stats().sink_dropped, 1);
}

TEST(ReorderBuffer, ManyThreadsKeepEveryEvent) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  std::atomic<uint64_t> corr{1};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        uint64_t c = corr.fetch_add(1);
        rb.addLaunch(launch(c, static_cast<int64_t>(c)));
        rb.addActivity(kernel(c, static_cast<int64_t>(c)));
      }
    });
  }
  for (auto& th : threads) th.join();
  rb.flush();
  EXPECT_EQ(sink.rows.size(), 2000u);
  EXPECT_EQ(rb.stats().matched, 2000);
}

// What the NCCL wrappers do for a split or shrink whose handle is at hand: derive its id, then
// register it with the rank and size NCCL gives.
void addSplit(CommRegistry& r, const void* parent, const void* comm, int32_t color, int32_t rank, int32_t nranks) {
  CommInfo info = r.deriveSplit(parent, color);
  info.rank = rank;
  info.nranks = nranks;
  r.add(comm, info);
}
void addShrink(CommRegistry& r, const void* parent, const void* comm, std::span<const int32_t> excluded,
               int32_t rank, int32_t nranks) {
  CommInfo info = r.deriveShrink(parent, excluded);
  info.rank = rank;
  info.nranks = nranks;
  r.add(comm, info);
}

TEST(CommRegistry, IdsAreStableAndSplitsDerive) {
  std::array<uint8_t, 128> uid{};
  uid[3] = 9;
  int64_t id = CommRegistry::idFromUniqueId(uid);
  EXPECT_GE(id, 0);
  EXPECT_EQ(id, CommRegistry::idFromUniqueId(uid));
  CommRegistry a, b;  // two ranks
  int pa = 0, pb = 0, ca = 0, cb = 0, da = 0, db_ = 0;
  a.add(&pa, {id, 0, 4, 0});
  b.add(&pb, {id, 3, 4, 3});
  addSplit(a, &pa, &ca, 1, 0, 2);
  addSplit(b, &pb, &cb, 1, 1, 2);
  addSplit(a, &pa, &da, 1, 0, 2);  // a second split with the same color is another communicator
  addSplit(b, &pb, &db_, 1, 1, 2);
  EXPECT_EQ(a.find(&ca)->id, b.find(&cb)->id);
  EXPECT_EQ(a.find(&da)->id, b.find(&db_)->id);
  EXPECT_NE(a.find(&ca)->id, a.find(&da)->id);
  EXPECT_EQ(a.nextSeq(&pa), 0);
  EXPECT_EQ(a.nextSeq(&pa), 1);
  EXPECT_EQ(a.nextSeq(&ca), 0);
  EXPECT_EQ(a.widest()->nranks, 4);
  EXPECT_EQ(b.widest()->rank, 3);
}

// A split whose handle NCCL gives only later (inside a group: at the outermost group end) keeps
// the id of its call's place among the parent's splits; a split that gives this rank no
// communicator (NCCL_SPLIT_NOCOLOR) still counts, as it does on the ranks that get one.
TEST(CommRegistry, SplitsWhoseHandleComesLaterKeepTheirCallsId) {
  const int64_t id = 777;
  CommRegistry a, b;
  int pa = 0, pb = 0, first_a = 0, first_b = 0, second_a = 0, second_b = 0, third_b = 0;
  a.add(&pa, {id, 0, 2, 5});
  b.add(&pb, {id, 1, 2, 6});
  const CommInfo first = a.deriveSplit(&pa, 0);  // handle not given yet
  EXPECT_EQ(first.rank, -1);
  EXPECT_EQ(first.device, 5);  // the parent's, until NCCL says
  addSplit(b, &pb, &first_b, 0, 1, 2);
  addSplit(a, &pa, &second_a, 0, 0, 2);
  addSplit(b, &pb, &second_b, 0, 1, 2);
  a.add(&first_a, {first.id, 0, 2, first.device});  // the handle, at the group end
  EXPECT_EQ(a.find(&first_a)->id, b.find(&first_b)->id);
  EXPECT_EQ(a.find(&second_a)->id, b.find(&second_b)->id);
  EXPECT_NE(a.find(&first_a)->id, a.find(&second_a)->id);
  (void)a.deriveSplit(&pa, -1);  // no communicator for rank 0
  addSplit(b, &pb, &third_b, 1, 0, 1);
  const CommInfo fourth = a.deriveSplit(&pa, 1);
  int fourth_b = 0;
  addSplit(b, &pb, &fourth_b, 1, 0, 1);
  EXPECT_EQ(fourth.id, b.find(&fourth_b)->id);
  EXPECT_EQ(CommRegistry().deriveSplit(&pa, 0).id, -1);  // an unknown parent gives no id
}

// ncclCommShrink: the remaining ranks, each naming the excluded ranks in its own order, agree on
// the new communicator's id; a second shrink, another exclusion or another parent gives another
// id, and a shrink never takes a split's id or moves the parent's split count (the excluded
// ranks, which do not call it, must go on agreeing with the others about later splits).
TEST(CommRegistry, ShrinksDeriveLikeSplitsWithoutDisturbingThem) {
  const int64_t id = 4242, other_id = 4343;
  CommRegistry a, b, c;  // ranks 0 and 2 remain, rank 1 is excluded
  int pa = 0, pb = 0, pc = 0, sa = 0, sb = 0, sa2 = 0, sb2 = 0, split_a = 0, split_c = 0;
  a.add(&pa, {id, 0, 3, 0});
  b.add(&pb, {id, 2, 3, 2});
  c.add(&pc, {id, 1, 3, 1});
  const std::vector<int32_t> excluded = {1};
  addShrink(a, &pa, &sa, excluded, 0, 2);
  addShrink(b, &pb, &sb, excluded, 1, 2);
  ASSERT_TRUE(a.find(&sa) && b.find(&sb));
  EXPECT_GE(a.find(&sa)->id, 0);
  EXPECT_EQ(a.find(&sa)->id, b.find(&sb)->id);
  EXPECT_NE(a.find(&sa)->id, id);
  EXPECT_EQ(a.find(&sa)->nranks, 2);
  EXPECT_EQ(b.find(&sb)->rank, 1);
  EXPECT_EQ(b.find(&sb)->device, 2);  // the parent's device
  // A second shrink of the same parent with the same (reordered, repeated) list: another id, equal
  // on both ranks.
  const std::vector<int32_t> again_a = {1, 1}, again_b = {1};
  addShrink(a, &pa, &sa2, again_a, 0, 2);
  addShrink(b, &pb, &sb2, again_b, 1, 2);
  EXPECT_EQ(a.find(&sa2)->id, b.find(&sb2)->id);
  EXPECT_NE(a.find(&sa2)->id, a.find(&sa)->id);
  // Every rank splits the parent later: the excluded rank's split count was not moved by the
  // shrinks it did not see, so all three agree.
  addSplit(a, &pa, &split_a, 0, 0, 3);
  addSplit(c, &pc, &split_c, 0, 1, 3);
  EXPECT_EQ(a.find(&split_a)->id, c.find(&split_c)->id);
  EXPECT_NE(a.find(&split_a)->id, a.find(&sa)->id);
  // Other exclusions and other parents give other ids.
  CommRegistry d;
  int pd = 0, sd = 0, pe = 0, se = 0;
  d.add(&pd, {id, 0, 4, 0});
  d.add(&pe, {other_id, 0, 4, 0});
  const std::vector<int32_t> two = {1, 3};
  addShrink(d, &pd, &sd, two, 0, 2);
  addShrink(d, &pe, &se, excluded, 0, 3);
  EXPECT_NE(d.find(&sd)->id, a.find(&sa)->id);
  EXPECT_NE(d.find(&se)->id, a.find(&sa)->id);
  // An unknown parent gives a communicator with no id (its collectives are still counted).
  CommRegistry e;
  int unknown = 0, child = 0;
  addShrink(e, &unknown, &child, excluded, 0, 2);
  ASSERT_TRUE(e.find(&child));
  EXPECT_EQ(e.find(&child)->id, -1);
  EXPECT_EQ(e.nextSeq(&child), 0);
}

// Numbers taken by calls that never ran are given back newest first; a number with a later one
// taken after it is kept (the communicator's count never goes back past a call that ran).
TEST(CommRegistry, ReturnedSeqsAreTakenAgain) {
  CommRegistry r;
  int comm = 0, other = 0;
  r.add(&comm, {1, 0, 2, 0});
  EXPECT_EQ(r.nextSeq(&comm), 0);
  const int64_t a = r.nextSeq(&comm), b = r.nextSeq(&comm);  // a simulated group's two calls
  EXPECT_FALSE(r.returnSeq(&comm, a)) << "b was taken after a";
  EXPECT_TRUE(r.returnSeq(&comm, b));
  EXPECT_TRUE(r.returnSeq(&comm, a));
  EXPECT_EQ(r.nextSeq(&comm), 1);
  EXPECT_FALSE(r.returnSeq(&other, 0)) << "an unknown communicator";
  EXPECT_FALSE(r.returnSeq(&comm, -1));
  EXPECT_EQ(r.nextSeq(&comm), 2);
}

TEST(CommRegistry, SeveralRootsHashAsOneLongUniqueId) {
  std::array<uint8_t, 256> two{};
  for (size_t i = 0; i < two.size(); ++i) two[i] = static_cast<uint8_t>(i * 7 + 1);
  const int64_t first = CommRegistry::idFromUniqueId(std::span(two).first(128));
  const int64_t both = CommRegistry::idFromUniqueId(two);
  EXPECT_NE(first, both);
  std::array<uint8_t, 256> swapped{};
  std::copy(two.begin() + 128, two.end(), swapped.begin());
  std::copy(two.begin(), two.begin() + 128, swapped.begin() + 128);
  EXPECT_NE(CommRegistry::idFromUniqueId(swapped), both);  // the roots' order is part of the id
}

// NVTX markers travel as library ops: they stay between the launches around them.
TEST(ReorderBuffer, MarkersKeepTheirPlaceBetweenLaunches) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  uint64_t a = rb.addLaunch(launch(1, 10));
  LibraryOp m;
  m.event.kind = EventKind::kMarker;
  m.event.name = 77;
  m.detail = db::Marker{db::MarkerKind::kRangeStart, db::kUnset, 5};
  rb.addLibraryOp(m);
  rb.addLaunch(launch(2, 30));
  (void)a;
  rb.addActivity(kernel(2, 300));
  rb.addActivity(kernel(1, 100));
  ASSERT_EQ(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows[0].e.gpu_start_ns, 100);
  ASSERT_TRUE(sink.rows[1].marker.has_value());
  EXPECT_EQ(sink.rows[1].marker->value, 5);
  EXPECT_EQ(sink.rows[1].e.name, 77);
  EXPECT_EQ(sink.rows[2].e.gpu_start_ns, 300);
}

// With drop_unmatched (a recording window), GPU records of unrecorded launches stay out.
TEST(ReorderBuffer, DropUnmatchedKeepsSkippedLaunchesOut) {
  FakeSink sink;
  ReorderOptions o;
  o.drop_unmatched = true;
  ReorderBuffer rb(sink, o);
  rb.addActivity(kernel(9, 100));  // its launch was outside the window
  rb.addLaunch(launch(1, 10));
  rb.addActivity(kernel(1, 200));
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.gpu_start_ns, 200);
  EXPECT_EQ(rb.stats().unmatched, 1);
}

}  // namespace
}  // namespace detrace::tracer
