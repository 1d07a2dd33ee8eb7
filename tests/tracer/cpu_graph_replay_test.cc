// CUDA graph replays of captured library ops, on the CPU: the reorder buffer writes each op a
// graph launch replays as an event of its own, placed among the launch's kernels by the tracer's
// own digest kernels around it (which are counted and never written), with its graph_ops row and
// its seq reported; the communicator numbers a replayed collective; the graph_ops table survives a
// write and a read, and traces without it read as having none.
#include <algorithm>
#include <map>
#include <random>
#include <string>

#include <sqlite3.h>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "detrace/tracer/comm_registry.h"
#include "detrace/tracer/reorder_buffer.h"

#include "../db/test_util.h"
#include "fake_sink.h"

namespace detrace::tracer {
namespace {

using db::EventKind;

using testing::FakeSink;

std::vector<std::pair<uint64_t, int64_t>> g_written;
void noteWritten(uint64_t token, int64_t seq) { g_written.emplace_back(token, seq); }

// A GEMM captured into a graph (its call recorded at capture as `template_token`), with `before`
// and `after` digest kernels captured around it.
GraphOpTemplate capturedGemm(int64_t m, uint64_t template_token, int32_t before, int32_t after) {
  GraphOpTemplate t;
  t.op.event.kind = EventKind::kGemm;
  t.op.event.name = 3;
  t.op.event.cpu_ns = 5;  // the capture's time: a replay takes its launch's
  t.op.event.stream = 99;
  db::Gemm g;
  g.m = m;
  t.op.detail = g;
  t.template_token = template_token;
  t.own_before = before;
  t.own_after = after;
  return t;
}

ApiLaunch graphLaunch(uint64_t corr, int64_t cpu_ns, std::shared_ptr<const GraphOpTemplates> ops,
                      int32_t expected, int64_t replay) {
  ApiLaunch l;
  l.correlation_id = corr;
  l.api = db::LaunchApi::kGraph;
  l.cpu_ns = cpu_ns;
  l.stream = 2;
  l.device = 0;
  l.is_graph = true;
  l.graph_key = 0x5000;
  l.expected_activities = expected;
  l.graph_ops = std::move(ops);
  l.graph_replay = replay;
  return l;
}

Activity record(uint64_t corr, int64_t start, int64_t node, bool own = false) {
  Activity a;
  a.correlation_id = corr;
  a.kind = EventKind::kKernel;
  a.name = own ? db::kUnset : 40 + node;
  a.device = 0;
  a.gpu_start_ns = start;
  a.gpu_end_ns = start + 4;
  a.graph_id = 7;
  a.graph_node_id = node;
  a.has_launch = !own;
  a.own = own;
  return a;
}

// One replay of a graph holding two captured GEMMs, in GPU order:
//   k0 | own own (op 0's inputs) k1 own (op 0's output) | k2 | own own (op 1's) k3 k4 own | k5
// comes out as k0, op 0, k1, k2, op 1, k3, k4, k5: each op just before its kernels, which name it
// as parent; the tracer's own kernels nowhere.
std::vector<Activity> oneReplay(uint64_t corr, int64_t t0) {
  return {record(corr, t0 + 0, 0),          record(corr, t0 + 10, 100, true),
          record(corr, t0 + 11, 101, true), record(corr, t0 + 20, 1),
          record(corr, t0 + 30, 102, true), record(corr, t0 + 35, 2),
          record(corr, t0 + 40, 103, true), record(corr, t0 + 41, 104, true),
          record(corr, t0 + 50, 3),         record(corr, t0 + 55, 4),
          record(corr, t0 + 60, 105, true), record(corr, t0 + 70, 5)};
}

TEST(GraphReplay, EachLaunchWritesItsReplayedOpsAmongItsKernels) {
  g_written.clear();
  FakeSink sink;
  ReorderOptions o;
  o.on_written = noteWritten;
  ReorderBuffer rb(sink, o);
  // The captured calls, recorded at capture time (their seqs are 0 and 1).
  LibraryOp call;
  call.event.kind = EventKind::kGemm;
  call.detail = db::Gemm{};
  uint64_t t0 = rb.addLibraryOp(call), t1 = rb.addLibraryOp(call);
  auto ops = std::make_shared<GraphOpTemplates>(
      GraphOpTemplates{capturedGemm(64, t0, 2, 1), capturedGemm(128, t1, 2, 1)});
  uint64_t first = 0;
  for (int replay = 0; replay < 3; ++replay) {
    uint64_t corr = 10 + static_cast<uint64_t>(replay);
    uint64_t token = rb.addLaunch(graphLaunch(corr, 1000 * (replay + 1), ops, 12, replay));
    if (replay == 0) first = token;
    // The next launch's tokens come after the ops' (op i is token + 1 + i).
    EXPECT_EQ(rb.addLaunch(graphLaunch(99, 0, nullptr, -1, -1)), token + 3);
    rb.launchFailed(token + 3);
    std::vector<Activity> records = oneReplay(corr, 10'000 * (replay + 1));
    std::shuffle(records.begin(), records.end(), std::mt19937(replay));
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(rb.pending(), 2u) << "complete only with all 12 records, the 6 own ones included";
      rb.addActivity(records[i]);
    }
    EXPECT_EQ(rb.pending(), 0u);
  }
  // Per replay: 6 kernels + 2 ops + the failed launch = 9 rows, after the 2 captured calls.
  ASSERT_EQ(sink.rows.size(), 2u + 3 * 9);
  for (int replay = 0; replay < 3; ++replay) {
    size_t b = 2 + 9 * static_cast<size_t>(replay);
    const auto& r = sink.rows;
    std::vector<int64_t> nodes;
    for (size_t i = b; i < b + 8; ++i)
      nodes.push_back(r[i].gemm ? -1 - r[i].gemm->m : r[i].e.graph_node_id);
    EXPECT_EQ(nodes, (std::vector<int64_t>{0, -65, 1, 2, -129, 3, 4, 5})) << "replay " << replay;
    const db::Event& op0 = r[b + 1].e;
    EXPECT_EQ(op0.kind, EventKind::kGemm);
    EXPECT_EQ(op0.cpu_ns, 1000 * (replay + 1)) << "the launch's time, not the capture's";
    EXPECT_EQ(op0.stream, 2) << "the launch's stream";
    EXPECT_EQ(op0.correlation_id, static_cast<int64_t>(10 + replay)) << "like the replay's kernels";
    EXPECT_EQ(op0.gpu_start_ns, 10'000 * (replay + 1) + 20) << "its kernel's time";
    EXPECT_EQ(op0.gpu_end_ns, 10'000 * (replay + 1) + 24);
    EXPECT_EQ(r[b + 2].e.parent_seq, r[b + 1].e.seq) << "k1 ran in op 0";
    EXPECT_EQ(r[b + 3].e.parent_seq, db::kUnset) << "k2 ran between the ops";
    EXPECT_EQ(r[b + 5].e.parent_seq, r[b + 4].e.seq);
    EXPECT_EQ(r[b + 6].e.parent_seq, r[b + 4].e.seq);
    EXPECT_EQ(r[b + 7].e.parent_seq, db::kUnset);
    EXPECT_EQ(r[b].e.parent_seq, db::kUnset);
  }
  // graph_ops: one row per op and launch, with the template's seq and the launch number.
  ASSERT_EQ(sink.graph_ops.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const db::GraphOp& g = sink.graph_ops[i];
    EXPECT_EQ(g.template_seq, static_cast<int64_t>(i % 2));
    EXPECT_EQ(g.replay, static_cast<int64_t>(i / 2));
    EXPECT_EQ(g.graph_exec, 0x5000);
    EXPECT_TRUE(sink.rows[static_cast<size_t>(g.seq)].gemm.has_value());
  }
  // on_written: the captured calls, then each replay's ops under tokens first+1, first+2.
  ASSERT_EQ(g_written.size(), 2u + 6u);
  EXPECT_EQ(g_written[2].first, first + 1);
  EXPECT_EQ(g_written[2].second, sink.graph_ops[0].seq);
  EXPECT_EQ(g_written[3].first, first + 2);
  EXPECT_EQ(g_written[3].second, sink.graph_ops[1].seq);
  ReorderStats s = rb.stats();
  EXPECT_EQ(s.graph_ops, 6);
  EXPECT_EQ(s.own_records, 18);
  EXPECT_EQ(s.timed_out, 0);
  EXPECT_EQ(rb.seqOf(first + 1), sink.graph_ops[0].seq);
}

// A call its library refused while it was captured (cuBLAS's NOT_SUPPORTED after its input
// digests went into the graph): its replays write no op and no graph_ops row, on_written hears
// kSeqDiscarded for it, and its own kernels still count, so the GEMMs around it keep their places:
//   k0 | own own (A's inputs) k1 own (A's output) | own own (the refused call's inputs) k2 |
//   own own (B's inputs) k3 own (B's output) | k4
// comes out as k0, A, k1, k2, B, k3, k4, with k2 nobody's child.
TEST(GraphReplay, ACallRefusedWhileCapturedIsNeverWrittenAndKeepsTheOthersInPlace) {
  g_written.clear();
  FakeSink sink;
  ReorderOptions o;
  o.on_written = noteWritten;
  ReorderBuffer rb(sink, o);
  GraphOpTemplate refused = capturedGemm(32, 0, 2, 0);
  refused.refused = true;
  auto ops = std::make_shared<GraphOpTemplates>(
      GraphOpTemplates{capturedGemm(16, 0, 2, 1), refused, capturedGemm(64, 0, 2, 1)});
  const uint64_t corr = 21;
  const uint64_t token = rb.addLaunch(graphLaunch(corr, 1000, ops, 14, 0));
  std::vector<Activity> records = {
      record(corr, 0, 0),         record(corr, 10, 100, true), record(corr, 11, 101, true),
      record(corr, 20, 1),        record(corr, 25, 102, true), record(corr, 30, 103, true),
      record(corr, 31, 104, true), record(corr, 40, 2),        record(corr, 50, 105, true),
      record(corr, 51, 106, true), record(corr, 60, 3),        record(corr, 65, 107, true),
      record(corr, 70, 4),        record(corr, 80, 108, true)};
  records.pop_back();  // 13 records: the launch expects 14 (one never comes), so flush
  std::shuffle(records.begin(), records.end(), std::mt19937(7));
  for (const Activity& a : records) rb.addActivity(a);
  rb.flush();
  std::vector<int64_t> order;  // kernels by node id, GEMMs as -1 - m
  for (const auto& r : sink.rows) order.push_back(r.gemm ? -1 - r.gemm->m : r.e.graph_node_id);
  EXPECT_EQ(order, (std::vector<int64_t>{0, -17, 1, 2, -65, 3, 4}));
  ASSERT_EQ(sink.rows.size(), 7u);
  EXPECT_EQ(sink.rows[2].e.parent_seq, sink.rows[1].e.seq) << "k1 ran in A";
  EXPECT_EQ(sink.rows[3].e.parent_seq, db::kUnset) << "k2 ran in nothing written";
  EXPECT_EQ(sink.rows[5].e.parent_seq, sink.rows[4].e.seq) << "k3 ran in B";
  ASSERT_EQ(sink.graph_ops.size(), 2u);
  std::map<uint64_t, int64_t> written(g_written.begin(), g_written.end());
  ASSERT_EQ(written.count(token + 2), 1u) << "the refused op's token is answered";
  EXPECT_EQ(written[token + 2], kSeqDiscarded);
  EXPECT_EQ(written[token + 1], sink.graph_ops[0].seq);
  EXPECT_EQ(written[token + 3], sink.graph_ops[1].seq);
  EXPECT_EQ(rb.stats().graph_ops, 2);
}

// A graph launch whose API call failed: no record comes, the launch is written as it is, and none
// of the ops its graph would have replayed is (nothing ran); on_written hears kSeqDiscarded for
// each, so that nothing waits for their fingerprints.
TEST(GraphReplay, AFailedGraphLaunchWritesNoReplayedOps) {
  g_written.clear();
  FakeSink sink;
  ReorderOptions o;
  o.on_written = noteWritten;
  ReorderBuffer rb(sink, o);
  auto ops = std::make_shared<GraphOpTemplates>(
      GraphOpTemplates{capturedGemm(8, 0, 2, 1), capturedGemm(16, 0, 2, 1)});
  const uint64_t failed = rb.addLaunch(graphLaunch(1, 10, ops, 12, 0));
  rb.launchFailed(failed);
  const uint64_t ok = rb.addLaunch(graphLaunch(2, 20, ops, 12, 1));
  for (const Activity& a : oneReplay(2, 1000)) rb.addActivity(a);
  rb.flush();
  int gemms = 0;
  for (const auto& r : sink.rows) gemms += r.gemm.has_value();
  EXPECT_EQ(gemms, 2) << "only the launch that ran replayed its GEMMs";
  ASSERT_EQ(sink.graph_ops.size(), 2u);
  for (const db::GraphOp& g : sink.graph_ops) EXPECT_EQ(g.replay, 1);
  std::map<uint64_t, int64_t> written(g_written.begin(), g_written.end());
  EXPECT_EQ(written[failed + 1], kSeqDiscarded);
  EXPECT_EQ(written[failed + 2], kSeqDiscarded);
  EXPECT_GE(written[ok + 1], 0);
  EXPECT_EQ(rb.stats().failed_launches, 1);
}

TEST(GraphReplay, OwnKernelsAreNeverWrittenAndCountTowardsAnUnknownSize) {
  FakeSink sink;
  ReorderOptions o;
  o.timeout_ns = 100;
  ReorderBuffer rb(sink, o);
  // An own kernel with no slot (a launch outside the window) is dropped, not written as an orphan.
  rb.addActivity(record(77, 5, 100, true));
  EXPECT_TRUE(sink.rows.empty());
  EXPECT_EQ(rb.stats().own_records, 1);
  // A graph of unknown size: written at the timeout; its size, own kernels included, is
  // remembered, so the next launch completes without waiting.
  auto ops = std::make_shared<GraphOpTemplates>(GraphOpTemplates{capturedGemm(8, 0, 2, 1)});
  rb.addLaunch(graphLaunch(1, 10, ops, -1, 0));
  for (const Activity& a : oneReplay(1, 1000)) rb.addActivity(a);
  rb.poll(10 + 200);
  size_t after_first = sink.rows.size();
  EXPECT_EQ(after_first, 7u);  // 6 kernels + 1 op (op 1's own kernels mark nothing more)
  rb.addLaunch(graphLaunch(2, 500, ops, -1, 1));
  for (const Activity& a : oneReplay(2, 5000)) rb.addActivity(a);
  EXPECT_EQ(sink.rows.size(), 2 * after_first) << "the remembered size completed it";
  EXPECT_EQ(rb.stats().timed_out, 1);
}

TEST(GraphReplay, ALaunchWithoutRecordsStillWritesItsOps) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  auto ops = std::make_shared<GraphOpTemplates>(
      GraphOpTemplates{capturedGemm(8, 0, 1, 1), capturedGemm(16, 0, 1, 1)});
  rb.addLaunch(graphLaunch(1, 10, ops, 20, 0));
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kKernel);  // the launch itself
  EXPECT_EQ(sink.rows[1].gemm->m, 8);
  EXPECT_EQ(sink.rows[2].gemm->m, 16);
  EXPECT_EQ(sink.graph_ops.size(), 2u);
  EXPECT_EQ(sink.graph_ops[0].template_seq, db::kUnset) << "no template recorded";
}

TEST(GraphReplay, ReplayedCollectivesTakeTheLaunchsCallNumbers) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  GraphOpTemplate allreduce;
  allreduce.op.event.kind = EventKind::kCollective;
  db::Collective c;
  c.op = db::CollOp::kAllReduce;
  c.comm_id = 42;
  c.comm_seq = 3;  // the captured call's number
  allreduce.op.detail = c;
  allreduce.own_before = 1;
  allreduce.own_after = 1;
  auto ops =
      std::make_shared<GraphOpTemplates>(GraphOpTemplates{capturedGemm(8, 0, 1, 1), allreduce});
  ApiLaunch l = graphLaunch(1, 10, ops, -1, 0);
  l.graph_op_comm_seqs = {db::kUnset, 17};
  rb.addLaunch(l);
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 3u);
  ASSERT_TRUE(sink.rows[2].coll.has_value());
  EXPECT_EQ(sink.rows[2].coll->comm_seq, 17);
  EXPECT_EQ(sink.rows[2].coll->comm_id, 42);

  CommRegistry comms;
  int a = 0, b = 0;
  comms.add(&a, CommInfo{42, 0, 2, 0});
  comms.add(&b, CommInfo{42, 1, 2, 1});  // one process, two ranks of the same communicator
  EXPECT_EQ(comms.nextSeq(&a), 0);
  EXPECT_EQ(comms.nextSeqFor(42, 0), 1) << "a replay continues the calls' numbering";
  EXPECT_EQ(comms.nextSeqFor(42, 1), 0) << "per rank";
  EXPECT_EQ(comms.nextSeqFor(43, 0), -1);
}

TEST(GraphReplay, LaterSlotsAreFoundPastTheReplayedOpsTokens) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  auto ops = std::make_shared<GraphOpTemplates>(GraphOpTemplates(50, capturedGemm(8, 0, 0, 0)));
  uint64_t g = rb.addLaunch(graphLaunch(1, 10, ops, 1, 0));
  std::vector<uint64_t> later;
  for (uint64_t c = 2; c < 40; ++c) {
    ApiLaunch k;
    k.correlation_id = c;
    k.cpu_ns = 10;
    later.push_back(rb.addLaunch(k));
  }
  EXPECT_EQ(later.front(), g + 51);
  rb.addAlias(later[5], 1000);  // found by token although tokens are not dense
  for (uint64_t c = 39; c >= 2; --c) {
    Activity a;
    a.correlation_id = c == 7 ? 1000 : c;
    a.kind = EventKind::kKernel;
    a.gpu_start_ns = static_cast<int64_t>(c);
    rb.addActivity(a);
  }
  EXPECT_EQ(rb.pending(), 1u + 38u) << "the graph holds the rest back";
  rb.addActivity(record(1, 1, 0));
  EXPECT_EQ(rb.pending(), 0u);
  EXPECT_EQ(rb.stats().matched, 39);
  EXPECT_EQ(sink.rows.size(), 1u + 50u + 38u);
}

// A GEMM captured with all its digests after its kernels (own_after of them), placed by the ids
// of its call's graph nodes.
GraphOpTemplate gemmByNodes(int64_t m, std::vector<int64_t> nodes, int32_t after = 1) {
  GraphOpTemplate t = capturedGemm(m, 0, 0, after);
  t.node_ids = std::move(nodes);
  t.by_nodes = true;
  return t;
}

GraphOpTemplate capturedAllReduce(int32_t before, int32_t after) {
  GraphOpTemplate t;
  t.op.event.kind = EventKind::kCollective;
  db::Collective c;
  c.op = db::CollOp::kAllReduce;
  t.op.detail = c;
  t.own_before = before;
  t.own_after = after;
  return t;
}

// One launch of a graph replaying `ops`, its records arriving in a random order: each row as a
// label ("k<node>" a kernel, "g<m>" a GEMM, "ar" an all-reduce) and "^<its parent's label>".
std::vector<std::string> replayLabels(GraphOpTemplates ops, std::vector<Activity> records,
                                      ReorderStats* stats = nullptr) {
  FakeSink sink;
  ReorderBuffer rb(sink);
  rb.addLaunch(graphLaunch(1, 10, std::make_shared<GraphOpTemplates>(std::move(ops)),
                           static_cast<int32_t>(records.size()), 0));
  std::shuffle(records.begin(), records.end(), std::mt19937(std::random_device{}()));
  for (const Activity& a : records) rb.addActivity(a);
  EXPECT_EQ(rb.pending(), 0u);
  if (stats != nullptr) *stats = rb.stats();
  auto label = [&](const FakeSink::Row& r) {
    if (r.gemm) return "g" + std::to_string(r.gemm->m);
    if (r.coll) return std::string("ar");
    return "k" + std::to_string(r.e.graph_node_id);
  };
  std::vector<std::string> out;
  for (const FakeSink::Row& r : sink.rows) {
    std::string l = label(r);
    if (r.e.parent_seq != db::kUnset) l += "^" + label(sink.rows.at(static_cast<size_t>(r.e.parent_seq)));
    out.push_back(l);
  }
  return out;
}

// k0 | g64's kernel (node 11), own | the program's k1 | g128's kernels (12, 13), own | k2: no own
// kernel comes before either GEMM's kernels.
std::vector<Activity> gemmsDigestedAfter() {
  return {record(1, 0, 0),   record(1, 10, 11), record(1, 20, 100, true), record(1, 30, 1),
          record(1, 40, 12), record(1, 45, 13), record(1, 50, 101, true), record(1, 60, 2)};
}

TEST(GraphReplay, OpsPlacedByTheirNodesOwnTheirKernelsAndNothingBetween) {
  ReorderStats stats;
  // Each op's ids: its call's nodes and their copies, of which the records name some.
  auto rows = replayLabels({gemmByNodes(64, {901, 11}), gemmByNodes(128, {13, 902, 12})},
                           gemmsDigestedAfter(), &stats);
  EXPECT_EQ(rows, (std::vector<std::string>{"k0", "g64", "k11^g64", "k1", "g128", "k12^g128",
                                            "k13^g128", "k2"}));
  EXPECT_EQ(stats.graph_ops, 2);
  EXPECT_EQ(stats.graph_ops_by_count, 0);
  // Counting own kernels cannot tell: with nothing before g128's kernels, k1 passes for its own.
  rows = replayLabels({capturedGemm(64, 0, 0, 1), capturedGemm(128, 0, 0, 1)}, gemmsDigestedAfter(),
                      &stats);
  EXPECT_EQ(rows[3], "g128");
  EXPECT_EQ(rows[4], "k1^g128");
  EXPECT_EQ(stats.graph_ops_by_count, 2);
}

TEST(GraphReplay, OpsPlacedByNodesThatDidNotComeOwnNothing) {
  ReorderStats stats;
  auto rows = replayLabels({gemmByNodes(64, {777}), gemmByNodes(128, {778})}, gemmsDigestedAfter(),
                           &stats);
  // Written where their own kernels say (op 1 after op 0's digest), parents of nothing.
  EXPECT_EQ(rows, (std::vector<std::string>{"g64", "k0", "k11", "g128", "k1", "k12", "k13", "k2"}));
  EXPECT_EQ(stats.graph_ops_by_count, 2);
}

TEST(GraphReplay, OpsOnConcurrentBranchesAreToldApartByTheirNodes) {
  // g64's kernels (11, 14) and g128's (12) interleave on two branches; the digests come last.
  std::vector<Activity> records = {record(1, 10, 11), record(1, 20, 12), record(1, 40, 14),
                                   record(1, 50, 100, true), record(1, 55, 101, true)};
  auto rows = replayLabels({gemmByNodes(64, {11, 14}), gemmByNodes(128, {12})}, records);
  EXPECT_EQ(rows, (std::vector<std::string>{"g64", "k11^g64", "g128", "k12^g128", "k14^g64"}));
  // In GPU order, whatever the order of the calls.
  rows = replayLabels({gemmByNodes(128, {12}), gemmByNodes(64, {11, 14})}, records);
  EXPECT_EQ(rows, (std::vector<std::string>{"g64", "k11^g64", "g128", "k12^g128", "k14^g64"}));
}

TEST(GraphReplay, AnOpWithNoDigestAfterItKeepsItsKernelBeforeAGemmPlacedByNodes) {
  // A send (its input's digest before it, nothing after: it has no output), then a GEMM whose
  // digests all come after its kernel: both have the same count of own kernels before them.
  std::vector<Activity> records = {record(1, 10, 100, true), record(1, 20, 30), record(1, 30, 11),
                                   record(1, 40, 101, true), record(1, 50, 2)};
  auto rows = replayLabels({capturedAllReduce(1, 0), gemmByNodes(64, {11})}, records);
  EXPECT_EQ(rows, (std::vector<std::string>{"ar", "k30^ar", "g64", "k11^g64", "k2"}));
  // A program kernel after the GEMM's is the send's no more.
  records.push_back(record(1, 35, 3));
  rows = replayLabels({capturedAllReduce(1, 0), gemmByNodes(64, {11})}, records);
  EXPECT_EQ(rows, (std::vector<std::string>{"ar", "k30^ar", "g64", "k11^g64", "k3", "k2"}));
}

TEST(GraphReplay, OpsPlacedByNodesAndByCountingShareALaunch) {
  // g64 by its node, then the program's k1, then an all-reduce with digests on both sides
  // (counted), then k2.
  std::vector<Activity> records = {record(1, 10, 11),       record(1, 20, 100, true),
                                   record(1, 30, 1),        record(1, 40, 101, true),
                                   record(1, 50, 20),       record(1, 60, 102, true),
                                   record(1, 70, 2)};
  ReorderStats stats;
  auto rows = replayLabels({gemmByNodes(64, {11}), capturedAllReduce(1, 1)}, records, &stats);
  EXPECT_EQ(rows, (std::vector<std::string>{"g64", "k11^g64", "k1", "ar", "k20^ar", "k2"}));
  EXPECT_EQ(stats.graph_ops_by_count, 1);
}

TEST(GraphReplay, GraphOpsTableRoundTrips) {
  testing::TempDir tmp;
  const std::string path = tmp.file("t.dtrace");
  {
    auto w = db::TraceWriter::create(path);
    ASSERT_TRUE(w.isOk()) << w.status().message();
    db::Event e;
    e.kind = EventKind::kGemm;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*w)->appendGemm(e, db::Gemm{}).has_value());
    EXPECT_TRUE((*w)->appendGraphOp({2, 0, 0, 0x5000}));
    EXPECT_TRUE((*w)->appendGraphOp({3, db::kUnset, 1, 0x5000}));
    EXPECT_FALSE((*w)->appendGraphOp({db::kUnset, 0, 0, 0})) << "an op the trace lacks";
    ASSERT_TRUE((*w)->close().isOk());
  }
  auto r = db::TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  std::vector<db::GraphOp> rows;
  ASSERT_TRUE((*r)->forEachGraphOp([&](const db::GraphOp& g) {
                    rows.push_back(g);
                    return Status::ok();
                  })
                  .isOk());
  EXPECT_EQ(rows, (std::vector<db::GraphOp>{{2, 0, 0, 0x5000}, {3, db::kUnset, 1, 0x5000}}));
  auto one = (*r)->graphOp(3);
  ASSERT_TRUE(one.isOk() && one->has_value());
  EXPECT_EQ((*one)->replay, 1);
  auto none = (*r)->graphOp(1);
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(*(*r)->graphOpsBefore(3), 1);
  EXPECT_EQ(*(*r)->graphOpsBefore(100), 2);

  // A trace written before the table existed: no rows, no error.
  r->reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "DROP TABLE graph_ops", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto old = db::TraceReader::open(path);
  ASSERT_TRUE(old.isOk()) << old.status().message();
  int n = 0;
  EXPECT_TRUE((*old)
                  ->forEachGraphOp([&](const db::GraphOp&) {
                    ++n;
                    return Status::ok();
                  })
                  .isOk());
  EXPECT_EQ(n, 0);
  EXPECT_EQ(*(*old)->graphOpsBefore(3), 0);
  auto missing = (*old)->graphOp(2);
  ASSERT_TRUE(missing.isOk());
  EXPECT_FALSE(missing->has_value());
}

}  // namespace
}  // namespace detrace::tracer
