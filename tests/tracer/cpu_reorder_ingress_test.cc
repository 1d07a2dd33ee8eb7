// The reorder buffer's way in: launches published at their API exit (addLaunchAtExit) without a
// lock, records that come before their launch's slot, and a ring smaller than the traffic, with
// several launching threads and a reader thread (no CUPTI, no GPU).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

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

TEST(ReorderIngress, LaunchAtExitCarriesItsAliasAndOutcome) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  (void)rb.launchEntering();
  const uint64_t a = rb.addLaunchAtExit(launch(10, 1), 0, /*alias=*/11, /*failed=*/false, 0);
  (void)rb.launchEntering();
  const uint64_t b = rb.addLaunchAtExit(launch(20, 2), 0, 0, /*failed=*/true, 0);
  EXPECT_LT(a, b);
  EXPECT_TRUE(sink.rows.empty()) << "the first launch waits for its GPU record";
  rb.addActivity(kernel(11, 500));  // the record carries the nested driver call's id
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[0].e.correlation_id, 10);
  EXPECT_EQ(sink.rows[0].e.gpu_start_ns, 500);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 20);
  EXPECT_EQ(sink.rows[1].e.gpu_start_ns, db::kUnset) << "a failed launch has no GPU record";
  ReorderStats s = rb.stats();
  EXPECT_EQ(s.matched_by_alias, 1);
  EXPECT_EQ(s.failed_launches, 1);
  EXPECT_EQ(s.launches, 2);
}

TEST(ReorderIngress, ALaunchPublishedAtExitFollowsTheOpsItsThreadMadeBefore) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  const uint64_t op = rb.addLibraryOp(gemm(1));
  (void)rb.launchEntering();
  rb.addLaunchAtExit(launch(5, 2), op, 0, false, 0);  // a kernel the GEMM launched
  (void)rb.launchEntering();
  rb.addLaunchAtExit(launch(6, 3), 0, 0, false, 0);
  rb.addActivity(kernel(6, 900));
  rb.addActivity(kernel(5, 800));
  ASSERT_EQ(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kGemm);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 5);
  EXPECT_EQ(sink.rows[1].e.parent_seq, sink.rows[0].e.seq);
  EXPECT_EQ(sink.rows[2].e.correlation_id, 6);
}

TEST(ReorderIngress, ALibraryOpIsWrittenByTheReaderNotByTheThreadThatAddsIt) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  const uint64_t first = rb.addLibraryOp(gemm(1));
  EXPECT_TRUE(sink.rows.empty()) << "addLibraryOp only publishes: the calling thread writes nothing";
  (void)rb.launchEntering();
  rb.addLaunchAtExit(launch(5, 2), first, 0, false, 0);
  const uint64_t second = rb.addLibraryOp(gemm(3));
  EXPECT_TRUE(sink.rows.empty());
  rb.poll(4);  // the reader: the first op is complete at the head, the launch waits for its record
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kGemm);
  EXPECT_EQ(rb.seqOf(first), sink.rows[0].e.seq);
  EXPECT_FALSE(rb.seqOf(second).has_value()) << "behind a launch still waiting for its record";
  rb.addActivity(kernel(5, 700));
  ASSERT_EQ(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 5);
  EXPECT_EQ(sink.rows[1].e.parent_seq, sink.rows[0].e.seq);
  EXPECT_EQ(sink.rows[2].e.kind, EventKind::kGemm);
  EXPECT_EQ(rb.seqOf(second), sink.rows[2].e.seq);
}

TEST(ReorderIngress, ARecordBeforeItsLaunchsExitWaitsForTheSlot) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  const uint32_t generation = rb.launchEntering();  // the API call is in progress ...
  rb.addActivity(kernel(7, 40));  // ... and its GPU record already came
  EXPECT_TRUE(sink.rows.empty());
  EXPECT_EQ(rb.stats().unmatched, 0);
  rb.addLaunchAtExit(launch(7, 1), 0, 0, false, generation);
  rb.poll(2);  // the slot is in: the held record completes it
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.gpu_start_ns, 40);
  EXPECT_EQ(rb.stats().matched, 1);
  EXPECT_EQ(rb.stats().unmatched, 0);
}

TEST(ReorderIngress, AHeldRecordWithNoSlotIsUnmatchedOnceItsWaitIsOver) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  (void)rb.launchEntering();  // never ends (capture stopped inside its callbacks)
  rb.addActivity(kernel(99, 40));  // its kernel ended at 50 ns
  EXPECT_EQ(rb.stats().held_early, 1);
  rb.poll(50 + 500'000'000);
  rb.poll(50 + 900'000'000);
  EXPECT_TRUE(sink.rows.empty()) << "held for a second after its kernel ended";
  rb.poll(50 + 1'100'000'000);
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.correlation_id, 99);
  EXPECT_EQ(rb.stats().unmatched, 1);
  rb.resetInFlight();  // forgets the launch that never ended: records are settled at once again
  rb.addActivity(kernel(100, 50));
  EXPECT_EQ(sink.rows.size(), 2u);
}

TEST(ReorderIngress, AHeldRecordIsSettledOnceNothingIsInFlight) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  const uint32_t a = rb.launchEntering();
  rb.addActivity(kernel(50, 10));  // not launch a's: some launch the callbacks never saw
  EXPECT_TRUE(sink.rows.empty());
  rb.addLaunchAtExit(launch(51, 1), 0, 0, false, a);
  rb.addActivity(kernel(51, 20));  // launch a's own record completes it; nothing is in flight now
  rb.poll(30);                      // long before the wait is over
  ASSERT_EQ(sink.rows.size(), 2u) << "no launch can bring the held record's slot any more";
  EXPECT_EQ(rb.stats().unmatched, 1);
  EXPECT_EQ(rb.stats().matched, 1);
}

TEST(ReorderIngress, OnlyPlainKernelRecordsAreEverHeld) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  (void)rb.launchEntering();  // in flight for the whole test
  Activity copy = kernel(60, 5);
  copy.kind = EventKind::kMemcpy;
  rb.addActivity(copy);        // copies have no launch slot to wait for
  Activity replayed = kernel(61, 6);
  replayed.graph_id = 3;       // a graph's kernels: their slot is the graph launch's, taken at enter
  rb.addActivity(replayed);
  Activity own = kernel(62, 7);
  own.own = true;              // the tracer's own digest
  rb.addActivity(own);
  EXPECT_EQ(rb.stats().held_early, 0);
  EXPECT_EQ(sink.rows.size(), 2u) << "the copy and the graph kernel, at once";
  EXPECT_EQ(rb.stats().own_records, 1);
}

TEST(ReorderIngress, AStaleGenerationEndsNothing) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  const uint32_t before_stop = rb.launchEntering();
  rb.resetInFlight();                    // a stop and a new start while it was in flight
  const uint32_t current = rb.launchEntering();
  EXPECT_NE(before_stop, current);
  rb.addLaunchAtExit(launch(70, 1), 0, 0, false, before_stop);  // ends nothing of `current`'s
  rb.addActivity(kernel(71, 9));         // launch `current` is still in flight: held
  EXPECT_EQ(rb.stats().held_early, 1);
  rb.addLaunchAtExit(launch(71, 2), 0, 0, false, current);
  rb.addActivity(kernel(70, 8));
  rb.poll(20);
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(rb.stats().matched, 2);
  EXPECT_EQ(rb.stats().unmatched, 0);
}

// A graph launch replaying library ops takes its ops' tokens as skip cells in a ring of 4, among
// launches published at their exits: every event comes out once, in token order.
TEST(ReorderIngress, GraphOpTokensAndExitLaunchesShareASmallRing) {
  FakeSink sink;
  ReorderOptions o;
  o.ingress_cells = 4;
  ReorderBuffer rb(sink, o);
  auto templates = std::make_shared<GraphOpTemplates>();
  for (int i = 0; i < 6; ++i) {
    GraphOpTemplate t;
    t.op = gemm(1);
    templates->push_back(t);
  }
  const uint32_t g0 = rb.launchEntering();
  rb.addLaunchAtExit(launch(1, 1), 0, 0, false, g0);
  ApiLaunch graph = launch(2, 2);
  graph.is_graph = true;
  graph.expected_activities = 1;
  graph.graph_ops = templates;
  const uint64_t graph_token = rb.addLaunch(graph);
  const uint32_t g1 = rb.launchEntering();
  const uint64_t last = rb.addLaunchAtExit(launch(3, 3), 0, 0, false, g1);
  EXPECT_EQ(last, graph_token + 7) << "the graph's six ops took the tokens after its own";
  rb.addActivity(kernel(1, 10));
  rb.addActivity(kernel(3, 30));
  rb.flush();
  ASSERT_GE(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows.front().e.correlation_id, 1);
  EXPECT_EQ(sink.rows.back().e.correlation_id, 3);
  EXPECT_GT(rb.stats().ingress_full, 0) << "a ring of 4 for 9 tokens must have filled";
  EXPECT_EQ(rb.stats().launches, 3);
}

TEST(ReorderIngress, AnAbandonedLaunchIsNoLongerInFlight) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  const uint32_t generation = rb.launchEntering();
  rb.launchAbandoned(generation);  // captured into a graph: no slot, no record will come
  rb.addActivity(kernel(5, 10));
  ASSERT_EQ(sink.rows.size(), 1u) << "nothing in flight: unmatched at once";
  EXPECT_EQ(rb.stats().unmatched, 1);
  EXPECT_EQ(rb.stats().launches, 0);
}

TEST(ReorderIngress, FlushSettlesHeldRecords) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  (void)rb.launchEntering();
  rb.addActivity(kernel(3, 10));
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(rb.stats().unmatched, 1);
}

// Launching threads publish at exit through a ring of 8 cells (so they often find it full and move
// cells themselves) while a reader thread delivers the GPU records in a shuffled order, often
// before the launch's exit: every launch is written once, with its own record, and each thread's
// launches keep their order. (No poll() here: it would settle records held for a whole period.)
TEST(ReorderIngress, ASmallRingUnderManyThreadsKeepsEveryLaunchInItsThreadsOrder) {
  FakeSink sink;
  ReorderOptions o;
  o.ingress_cells = 8;
  ReorderBuffer rb(sink, o);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 3000;
  std::atomic<uint64_t> next_corr{1};
  std::vector<std::vector<uint64_t>> issued(kThreads);
  std::atomic<bool> done{false};
  std::vector<uint64_t> delivered_ids;
  std::mutex delivered_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint32_t generation = rb.launchEntering();
        const uint64_t corr = next_corr.fetch_add(1);
        issued[t].push_back(corr);
        // The thread number rides in the stream id, to check each thread's order afterwards.
        rb.addLaunchAtExit(launch(corr, static_cast<int64_t>(corr), /*stream=*/t), 0, 0, false,
                           generation);
      }
    });
  }
  std::thread reader([&] {
    std::mt19937_64 rng(std::random_device{}());
    uint64_t sent = 1;
    while (!done.load() || sent < next_corr.load()) {
      const uint64_t upto = next_corr.load();
      std::vector<uint64_t> batch;
      for (; sent < upto; ++sent) batch.push_back(sent);
      std::shuffle(batch.begin(), batch.end(), rng);
      for (uint64_t c : batch) rb.addActivity(kernel(c, static_cast<int64_t>(c) * 10));
    }
  });
  for (auto& th : threads) th.join();
  done.store(true);
  reader.join();
  rb.flush();
  ASSERT_EQ(sink.rows.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (const auto& r : sink.rows) {
    ASSERT_GE(r.e.stream, 0);
    ASSERT_LT(r.e.stream, kThreads);
    EXPECT_EQ(r.e.gpu_start_ns, r.e.correlation_id * 10) << "each launch got its own record";
    seen[static_cast<size_t>(r.e.stream)].push_back(r.e.correlation_id);
  }
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), issued[t].size());
    for (size_t i = 0; i < seen[t].size(); ++i) {
      EXPECT_EQ(seen[t][i], static_cast<int64_t>(issued[t][i])) << "thread " << t << " launch " << i;
    }
  }
  ReorderStats s = rb.stats();
  EXPECT_EQ(s.matched, kThreads * kPerThread);
  EXPECT_EQ(s.unmatched, 0);
  EXPECT_EQ(s.launches, kThreads * kPerThread);
  EXPECT_GT(s.ingress_full, 0) << "a ring of 8 cells must have filled";
}

}  // namespace
}  // namespace detrace::tracer
