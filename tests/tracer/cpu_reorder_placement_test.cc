// Placement by correlation id (ReorderOptions::place_records): kernel records with no launch slot
// are written among library ops in correlation order, after a hold, and take as parent the op whose
// call window holds their id. No CUPTI, no GPU: fake ops and records, random programs.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "detrace/tracer/reorder_buffer.h"
#include "fake_sink.h"
#include "reorder_fakes.h"

namespace detrace::tracer {
namespace {

using db::EventKind;
using testing::FakeSink;
using testing::kernel;

constexpr int64_t kHold = 1000;

ReorderOptions placing() {
  ReorderOptions o;
  o.place_records = true;
  o.records_hold_ns = kHold;
  return o;
}

LibraryOp gemmAt(uint64_t position, int64_t cpu_ns) {
  LibraryOp op = testing::gemm(cpu_ns);
  op.position = position;
  return op;
}

Activity kernelOn(int64_t stream, uint64_t corr, int64_t start) {
  Activity a = kernel(corr, start);
  a.stream = stream;
  return a;
}

TEST(ReorderPlacement, RecordsGoAmongOpsByCorrelationIdAndTakeTheirWindowsOpAsParent) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  // The program: kernel 5, GEMM (marker 10) launching kernel 12 (window 10..13), GEMM (marker 14)
  // launching 15 (window 14..16), kernel 17. Records arrive out of order.
  const uint64_t g1 = rb.addLibraryOp(gemmAt(10, 100));
  rb.addWindowEdge(g1, 10, true);
  rb.addWindowEdge(g1, 13, false);
  const uint64_t g2 = rb.addLibraryOp(gemmAt(14, 200));
  rb.addWindowEdge(g2, 14, true);
  rb.addWindowEdge(g2, 16, false);
  rb.addActivity(kernel(17, 400));
  rb.addActivity(kernel(12, 300));
  rb.addActivity(kernel(5, 50));
  rb.addActivity(kernel(15, 350));
  EXPECT_TRUE(sink.rows.empty()) << "nothing is written before its hold is over";
  rb.poll(200 + kHold);  // the hold of kernel 5, the first GEMM and kernel 12 (start 300) ...
  ASSERT_EQ(sink.rows.size(), 2u) << "kernel 5 and the first GEMM (kernel 12 started at 300)";
  rb.poll(400 + kHold);
  ASSERT_EQ(sink.rows.size(), 6u);
  const auto& r = sink.rows;
  EXPECT_EQ(r[0].e.correlation_id, 5);
  EXPECT_EQ(r[0].e.parent_seq, db::kUnset);
  EXPECT_EQ(r[1].e.kind, EventKind::kGemm);
  EXPECT_EQ(r[2].e.correlation_id, 12);
  EXPECT_EQ(r[2].e.parent_seq, r[1].e.seq);
  EXPECT_EQ(r[3].e.kind, EventKind::kGemm);
  EXPECT_EQ(r[4].e.correlation_id, 15);
  EXPECT_EQ(r[4].e.parent_seq, r[3].e.seq);
  EXPECT_EQ(r[5].e.correlation_id, 17);
  EXPECT_EQ(r[5].e.parent_seq, db::kUnset) << "after the last window closed";
  const ReorderStats s = rb.stats();
  EXPECT_EQ(s.placed, 4);
  EXPECT_EQ(s.placed_with_parent, 2);
  EXPECT_EQ(s.placed_late, 0);
  EXPECT_EQ(s.unmatched, 0);
}

TEST(ReorderPlacement, ARecordThatComesAfterItsPlaceIsWrittenLateNotLost) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  rb.addActivity(kernel(20, 100));
  rb.poll(100 + kHold);
  ASSERT_EQ(sink.rows.size(), 1u);
  rb.addActivity(kernel(8, 90));  // its kernel waited long on another stream
  rb.poll(200 + kHold);
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 8);
  EXPECT_EQ(rb.stats().placed_late, 1);
}

TEST(ReorderPlacement, FlushWritesEverythingInOrderAndTheCapForcesTheOldestOut) {
  FakeSink sink;
  ReorderOptions o = placing();
  o.max_held_records = 3;
  ReorderBuffer rb(sink, o);
  for (uint64_t corr : {4u, 2u, 3u}) rb.addActivity(kernel(corr, 10));
  EXPECT_TRUE(sink.rows.empty());
  rb.addActivity(kernel(1, 10));  // a fourth: the smallest id goes out at once
  ASSERT_EQ(sink.rows.size(), 1u);
  EXPECT_EQ(sink.rows[0].e.correlation_id, 1);
  rb.addLibraryOp(gemmAt(3, 5));  // placed between 2 and 3: ids 3 and up came after its marker
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 5u);
  EXPECT_EQ(sink.rows[1].e.correlation_id, 2);
  EXPECT_EQ(sink.rows[2].e.kind, EventKind::kGemm);
  EXPECT_EQ(sink.rows[3].e.correlation_id, 3);
  EXPECT_EQ(sink.rows[4].e.correlation_id, 4);
  EXPECT_EQ(rb.stats().placed_forced, 1);
}

TEST(ReorderPlacement, SettleWritesWhatIsCompleteWithoutWaitingForTheHold) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  rb.addActivity(kernel(3, 10));
  rb.addLibraryOp(gemmAt(4, 20));
  rb.addActivity(kernel(5, 30));
  rb.addLibraryOp(gemmAt(6, 40), 0, /*complete=*/false);  // an NCCL call still deciding
  rb.addActivity(kernel(7, 50));
  rb.poll(60);
  EXPECT_TRUE(sink.rows.empty()) << "within the hold";
  rb.settle();  // e.g. the context is being torn down: no earlier record will come
  ASSERT_EQ(sink.rows.size(), 3u) << "kernel 3, the GEMM, kernel 5; the incomplete op holds 7";
  EXPECT_EQ(sink.rows[0].e.correlation_id, 3);
  EXPECT_EQ(sink.rows[1].e.kind, EventKind::kGemm);
  EXPECT_EQ(sink.rows[2].e.correlation_id, 5);
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 5u);
  EXPECT_EQ(sink.rows[4].e.correlation_id, 7);
}

// One context is torn down while another runs on (two GPUs): settle(context) writes the dying
// context's held records at once, with what is placed before them, and leaves the rest held for
// its hold, so that a record the live context's slower stream sends later still goes in its place.
TEST(ReorderPlacement, SettlingAContextLeavesAnotherContextsLaterRecordsHeld) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  auto in = [](uint32_t context, uint64_t corr, int64_t start) {
    Activity a = kernelOn(static_cast<int64_t>(context), corr, start);
    a.context = context;
    return a;
  };
  rb.addActivity(in(1, 3, 10));  // context 1: torn down after kernel 5
  rb.addActivity(in(2, 4, 12));  // context 2: runs on
  rb.addActivity(in(1, 5, 14));
  rb.addLibraryOp(gemmAt(6, 16));  // after context 1's last kernel
  rb.addActivity(in(2, 8, 18));
  rb.poll(20);
  EXPECT_TRUE(sink.rows.empty()) << "within the hold";
  rb.settle(/*context=*/9);
  EXPECT_TRUE(sink.rows.empty()) << "a context with no records held settles nothing";
  rb.settle(/*context=*/1);
  ASSERT_EQ(sink.rows.size(), 3u) << "kernels 3, 4 and 5: the dying context's and those before";
  EXPECT_EQ(sink.rows[2].e.correlation_id, 5);
  rb.addActivity(in(2, 7, 15));  // context 2's slower stream
  rb.poll(18 + kHold);
  ASSERT_EQ(sink.rows.size(), 6u);
  EXPECT_EQ(sink.rows[3].e.kind, EventKind::kGemm);
  EXPECT_EQ(sink.rows[4].e.correlation_id, 7) << "context 2's kernel 7 came after 8 was written";
  EXPECT_EQ(sink.rows[5].e.correlation_id, 8);
  EXPECT_EQ(rb.stats().placed_late, 0);
}

TEST(ReorderPlacement, TurningPlacementOffWritesWhatIsHeld) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  rb.addActivity(kernel(7, 10));
  EXPECT_TRUE(sink.rows.empty());
  rb.setPlaceRecords(false);
  ASSERT_EQ(sink.rows.size(), 1u);
  rb.addActivity(kernel(9, 20));  // now written on arrival, as without placement
  EXPECT_EQ(sink.rows.size(), 2u);
}

// Random programs: plain kernels, GEMMs launching 1-3 kernels inside their windows, nested
// windows (a GEMM inside an annotated range), records delivered in random batches and order,
// polls at random times. The trace must list every kernel and op in correlation order, each
// kernel under its innermost enclosing op.
// A library call under way when capture stops: the stop turns placement off before the call
// returns, so its window's closing edge never comes. The stop's flush closes it: after the next
// start, a kernel of its stream outside any call has no parent.
TEST(ReorderPlacement, AWindowLeftOpenByAStopParentsNothingAfterTheNextStart) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  const uint64_t g = rb.addLibraryOp(gemmAt(10, 100));
  rb.addWindowEdge(g, 10, true, /*stream=*/1);
  rb.addActivity(kernelOn(1, 11, 150));
  rb.flush();  // the stop
  ASSERT_EQ(sink.rows.size(), 2u);
  EXPECT_EQ(sink.rows[1].e.parent_seq, sink.rows[0].e.seq) << "its own kernel keeps it";
  rb.setPlaceRecords(false);
  rb.setPlaceRecords(true);  // the next start
  rb.addActivity(kernelOn(1, 500, 10'000));
  rb.poll(10'000 + kHold);
  ASSERT_EQ(sink.rows.size(), 3u);
  EXPECT_EQ(sink.rows[2].e.parent_seq, db::kUnset) << "a kernel after the restart took the old call as parent";
}

// More records than may be held arrive while the head is an op still waiting (an NCCL call before
// its choices come): the op is written first, as at its timeout, so that its own kernels, forced
// out after it, keep it as parent.
TEST(ReorderPlacement, RecordsForcedOutPastAWaitingOpKeepItAsParent) {
  FakeSink sink;
  ReorderOptions o = placing();
  o.max_held_records = 2;
  ReorderBuffer rb(sink, o);
  const uint64_t op = rb.addLibraryOp(gemmAt(10, 100), 0, /*complete=*/false);
  rb.addWindowEdge(op, 10, true);
  rb.addWindowEdge(op, 20, false);
  for (uint64_t c : {11u, 12u, 13u}) rb.addActivity(kernel(c, 150));
  ASSERT_EQ(sink.rows.size(), 1u) << "the cap forced one thing out";
  EXPECT_EQ(sink.rows[0].e.kind, EventKind::kGemm) << "a kernel was written before its op";
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 4u);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(sink.rows[i].e.parent_seq, sink.rows[0].e.seq) << "kernel " << i;
  EXPECT_EQ(rb.stats().placed_with_parent, 3);
}

TEST(ReorderPlacement, RandomProgramsComeOutInProgramOrderWithTheirParents) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    FakeSink sink;
    ReorderOptions o = placing();
    o.max_held_records = 1 + rng() % 64;  // sometimes forced out early: order must still hold
    ReorderBuffer rb(sink, o);
    const bool forcing = o.max_held_records < 64;
    uint64_t corr = 1;
    int64_t clock = 0;
    struct Expect {
      bool op;
      uint64_t id;       // correlation id (kernel) or position (op)
      int64_t parent;    // index into `program` of the parent op, -1: none
    };
    std::vector<Expect> program;
    std::vector<Activity> records;
    const int steps = 5 + static_cast<int>(rng() % 40);
    int64_t outer = -1;  // an annotated range, open over some steps
    uint64_t outer_token = 0;
    for (int i = 0; i < steps; ++i) {
      clock += 10;
      const int what = static_cast<int>(rng() % 4);
      if (what == 0 && outer < 0) {  // open a range
        const uint64_t pos = corr++;
        outer_token = rb.addLibraryOp(gemmAt(pos, clock));
        rb.addWindowEdge(outer_token, pos, true);
        outer = static_cast<int64_t>(program.size());
        program.push_back({true, pos, -1});
      } else if (what == 1 && outer >= 0) {  // close it
        rb.addWindowEdge(outer_token, corr++, false);
        outer = -1;
      } else if (what == 2) {  // a GEMM with its kernels
        const uint64_t pos = corr++;
        const uint64_t token = rb.addLibraryOp(gemmAt(pos, clock));
        rb.addWindowEdge(token, pos, true);
        const int64_t op = static_cast<int64_t>(program.size());
        program.push_back({true, pos, outer});
        for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
          program.push_back({false, corr, op});
          records.push_back(kernel(corr++, clock + k));
        }
        rb.addWindowEdge(token, corr++, false);
      } else {  // a plain kernel
        program.push_back({false, corr, outer});
        records.push_back(kernel(corr++, clock));
      }
    }
    std::shuffle(records.begin(), records.end(), rng);
    for (size_t i = 0; i < records.size(); ++i) {
      rb.addActivity(records[i]);
      if (rng() % 4 == 0) rb.poll(clock + static_cast<int64_t>(rng() % 40));  // holds not over yet
    }
    if (rng() % 2) rb.poll(clock + 10 + kHold);
    rb.flush();
    ASSERT_EQ(sink.rows.size(), program.size()) << "trial " << trial;
    if (forcing && rb.stats().placed_forced > 0) continue;  // order not promised past the cap
    std::map<int64_t, int64_t> seq_of;  // program index -> seq
    for (size_t i = 0; i < program.size(); ++i) {
      const auto& row = sink.rows[i].e;
      const Expect& want = program[i];
      ASSERT_EQ(row.kind == EventKind::kGemm, want.op) << "trial " << trial << " event " << i;
      seq_of[static_cast<int64_t>(i)] = row.seq;
      if (!want.op) {
        EXPECT_EQ(row.correlation_id, static_cast<int64_t>(want.id)) << "trial " << trial;
        const int64_t parent = want.parent < 0 ? db::kUnset : seq_of[want.parent];
        EXPECT_EQ(row.parent_seq, parent) << "trial " << trial << " kernel " << want.id;
      }
    }
  }
}

// Two threads: a GEMM on stream 1 (window 10..20) and, started during it, one on stream 2
// (window 12..18). Each kernel takes the window of its own stream; a kernel on a third stream
// takes none; a window that names no stream (an NCCL group's) takes any.
TEST(ReorderPlacement, WindowsTakeOnlyTheRecordsOfTheirOwnStream) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  const uint64_t a = rb.addLibraryOp(gemmAt(10, 100));
  rb.addWindowEdge(a, 10, true, /*stream=*/1);
  const uint64_t b = rb.addLibraryOp(gemmAt(12, 110));
  rb.addWindowEdge(b, 12, true, /*stream=*/2);
  rb.addWindowEdge(b, 18, false);
  rb.addWindowEdge(a, 20, false);
  const uint64_t group = rb.addLibraryOp(gemmAt(30, 200));
  rb.addWindowEdge(group, 30, true);  // any stream
  rb.addWindowEdge(group, 40, false);
  for (const Activity& k : {kernelOn(1, 13, 120), kernelOn(2, 14, 121), kernelOn(3, 15, 122),
                            kernelOn(1, 19, 123), kernelOn(2, 31, 210), kernelOn(5, 32, 211)}) {
    rb.addActivity(k);
  }
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 9u);
  std::map<uint64_t, int64_t> parent_of;  // kernel correlation id -> parent's seq
  int64_t seq_a = -1, seq_b = -1, seq_group = -1;
  for (const auto& row : sink.rows) {
    if (row.e.kind == EventKind::kGemm) {
      (row.e.cpu_ns == 100 ? seq_a : row.e.cpu_ns == 110 ? seq_b : seq_group) = row.e.seq;
    } else {
      parent_of[static_cast<uint64_t>(row.e.correlation_id)] = row.e.parent_seq;
    }
  }
  EXPECT_EQ(parent_of[13], seq_a);
  EXPECT_EQ(parent_of[14], seq_b);
  EXPECT_EQ(parent_of[15], db::kUnset) << "another thread's kernel on another stream";
  EXPECT_EQ(parent_of[19], seq_a);
  EXPECT_EQ(parent_of[31], seq_group);
  EXPECT_EQ(parent_of[32], seq_group);
  EXPECT_EQ(rb.stats().placed_with_parent, 5);
}

// A decode loop's worth of GEMMs inside one hold (about 3700 on the H200 in 0.5 s): every window
// still waits for its records when they come, however many came before them.
TEST(ReorderPlacement, ThousandsOfWindowsWithinTheHoldKeepTheirParents) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  constexpr int kGemms = 5000;
  uint64_t corr = 1;
  std::vector<Activity> records;
  for (int i = 0; i < kGemms; ++i) {
    const uint64_t pos = corr++;
    const uint64_t token = rb.addLibraryOp(gemmAt(pos, i));
    rb.addWindowEdge(token, pos, true, /*stream=*/1);
    records.push_back(kernelOn(1, corr++, i));
    rb.addWindowEdge(token, corr++, false);
    records.push_back(kernelOn(1, corr++, i));  // between GEMMs: no parent
  }
  for (const Activity& r : records) rb.addActivity(r);
  rb.flush();
  ASSERT_EQ(sink.rows.size(), 3u * kGemms);
  int64_t last_gemm = db::kUnset;
  for (size_t i = 0; i < sink.rows.size(); ++i) {
    const db::Event& e = sink.rows[i].e;
    if (e.kind == EventKind::kGemm) {
      last_gemm = e.seq;
      continue;
    }
    const bool inside = i % 3 == 1;
    ASSERT_EQ(e.parent_seq, inside ? last_gemm : db::kUnset) << "row " << i;
  }
  EXPECT_EQ(rb.stats().placed_with_parent, kGemms);
}

// Random programs of two threads, each on its own stream, their calls interleaved: every kernel
// takes its own thread's enclosing GEMM as parent, never the other thread's.
TEST(ReorderPlacement, InterleavedThreadsOnTheirOwnStreamsKeepTheirOwnParents) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    FakeSink sink;
    ReorderBuffer rb(sink, placing());
    uint64_t corr = 1;
    int64_t clock = 0;
    struct Thread {
      int64_t stream;
      uint64_t open_token = 0;   // its GEMM whose call is under way (0: none)
      int64_t open_cpu = -1;     // that GEMM's cpu_ns (identifies its row)
      int kernels_left = 0;
    };
    Thread threads[2] = {{1}, {2}};
    std::map<uint64_t, int64_t> want_parent_cpu;  // kernel correlation id -> parent's cpu_ns, -1
    std::vector<Activity> records;
    const int steps = 10 + static_cast<int>(rng() % 60);
    for (int i = 0; i < steps; ++i) {
      Thread& t = threads[rng() % 2];
      clock += 10;
      if (t.open_token == 0 && rng() % 3 == 0) {  // a GEMM's call begins
        const uint64_t pos = corr++;
        t.open_token = rb.addLibraryOp(gemmAt(pos, clock));
        rb.addWindowEdge(t.open_token, pos, true, t.stream);
        t.open_cpu = clock;
        t.kernels_left = 1 + static_cast<int>(rng() % 3);
      } else if (t.open_token != 0 && t.kernels_left == 0) {  // ... and ends
        rb.addWindowEdge(t.open_token, corr++, false);
        t.open_token = 0;
        t.open_cpu = -1;
      } else {  // a kernel: the GEMM's, or a plain one
        want_parent_cpu[corr] = t.open_cpu;
        records.push_back(kernelOn(t.stream, corr++, clock));
        if (t.kernels_left > 0) --t.kernels_left;
      }
    }
    std::shuffle(records.begin(), records.end(), rng);
    for (const Activity& r : records) rb.addActivity(r);
    rb.flush();
    std::map<int64_t, int64_t> seq_of_cpu;
    for (const auto& row : sink.rows) {
      if (row.e.kind == EventKind::kGemm) seq_of_cpu[row.e.cpu_ns] = row.e.seq;
    }
    int checked = 0;
    for (const auto& row : sink.rows) {
      if (row.e.kind == EventKind::kGemm) continue;
      const int64_t cpu = want_parent_cpu.at(static_cast<uint64_t>(row.e.correlation_id));
      const int64_t want = cpu < 0 ? db::kUnset : seq_of_cpu.at(cpu);
      EXPECT_EQ(row.e.parent_seq, want) << "trial " << trial << " kernel " << row.e.correlation_id;
      ++checked;
    }
    ASSERT_EQ(checked, static_cast<int>(records.size())) << "trial " << trial;
  }
}

// Two threads' GEMMs: A takes its marker (100) before B takes its (105), but B's op is published
// first (filling an op and finding its stream take their time between the marker and the
// publication). The ops are written in marker order all the same, so that A's kernel (103) comes
// after A and names it as parent.
TEST(ReorderPlacement, OpsPublishedOutOfMarkerOrderAreWrittenInMarkerOrder) {
  FakeSink sink;
  ReorderBuffer rb(sink, placing());
  const uint64_t b = rb.addLibraryOp(gemmAt(105, 110));  // thread B
  rb.addWindowEdge(b, 105, true, /*stream=*/2);
  const uint64_t a = rb.addLibraryOp(gemmAt(100, 100));  // thread A
  rb.addWindowEdge(a, 100, true, /*stream=*/1);
  rb.addWindowEdge(a, 110, false);
  rb.addWindowEdge(b, 111, false);
  rb.addActivity(kernelOn(1, 103, 150));
  rb.addActivity(kernelOn(2, 107, 160));
  rb.poll(160 + kHold);
  ASSERT_EQ(sink.rows.size(), 4u);
  const auto& r = sink.rows;
  EXPECT_EQ(r[0].e.cpu_ns, 100) << "op A first";
  EXPECT_EQ(r[1].e.correlation_id, 103);
  EXPECT_EQ(r[1].e.parent_seq, r[0].e.seq) << "A's kernel lost its parent";
  EXPECT_EQ(r[2].e.cpu_ns, 110) << "then op B";
  EXPECT_EQ(r[3].e.correlation_id, 107);
  EXPECT_EQ(r[3].e.parent_seq, r[2].e.seq);
  EXPECT_EQ(rb.stats().placed_late, 0);
  EXPECT_EQ(rb.stats().placed_with_parent, 2);
}

// Random programs of two threads, each on its own stream, whose publications (an op with its
// window's opening edge, a closing edge) reach the buffer in any interleaving that keeps each
// thread's own order, so ops come in out of marker order. Once the hold is over (or at flush)
// everything is written in correlation order, each kernel under its own thread's GEMM.
TEST(ReorderPlacement, OpsPublishedInAnyOrderAcrossThreadsComeOutInMarkerOrder) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    FakeSink sink;
    ReorderBuffer rb(sink, placing());
    uint64_t corr = 1;
    int64_t clock = 0;
    struct Thread {
      int64_t stream;
      int open = -1;  // its GEMM whose call is under way (index into tokens), -1: none
      int kernels_left = 0;
      std::vector<std::function<void()>> publications;  // in the thread's order
    };
    Thread threads[2] = {{1, -1, 0, {}}, {2, -1, 0, {}}};
    std::vector<uint64_t> tokens;                 // op index -> token (once published)
    std::map<int64_t, uint64_t> position_of_cpu;  // op cpu_ns -> marker
    std::map<uint64_t, int> want_parent_op;       // kernel correlation id -> op index, -1: none
    std::vector<Activity> records;
    const int steps = 10 + static_cast<int>(rng() % 60);
    for (int i = 0; i < steps; ++i) {
      Thread& t = threads[rng() % 2];
      clock += 10;
      if (t.open < 0 && rng() % 3 == 0) {  // a GEMM's call begins
        const int op = static_cast<int>(tokens.size());
        tokens.push_back(0);
        const uint64_t pos = corr++;
        const int64_t cpu = clock, stream = t.stream;
        position_of_cpu[cpu] = pos;
        t.publications.push_back([&rb, &tokens, op, pos, cpu, stream] {
          tokens[op] = rb.addLibraryOp(gemmAt(pos, cpu));
          rb.addWindowEdge(tokens[op], pos, true, stream);
        });
        t.open = op;
        t.kernels_left = 1 + static_cast<int>(rng() % 3);
      } else if (t.open >= 0 && t.kernels_left == 0) {  // ... and ends
        const int op = t.open;
        const uint64_t pos = corr++;
        t.publications.push_back(
            [&rb, &tokens, op, pos] { rb.addWindowEdge(tokens[op], pos, false); });
        t.open = -1;
      } else {  // a kernel: the GEMM's, or a plain one
        want_parent_op[corr] = t.open;
        records.push_back(kernelOn(t.stream, corr++, clock));
        if (t.kernels_left > 0) --t.kernels_left;
      }
    }
    // Any interleaving of the two threads' publications.
    size_t next[2] = {0, 0};
    while (next[0] < threads[0].publications.size() || next[1] < threads[1].publications.size()) {
      int pick = static_cast<int>(rng() % 2);
      if (next[pick] == threads[pick].publications.size()) pick = 1 - pick;
      threads[pick].publications[next[pick]++]();
    }
    std::shuffle(records.begin(), records.end(), rng);
    for (const Activity& r : records) rb.addActivity(r);
    if (rng() % 2) rb.poll(clock + 10 + kHold);
    rb.flush();
    ASSERT_EQ(sink.rows.size(), records.size() + tokens.size()) << "trial " << trial;
    std::vector<int64_t> seq_of_op;
    for (uint64_t token : tokens) seq_of_op.push_back(rb.seqOf(token).value_or(-1));
    uint64_t last = 0;
    for (const auto& row : sink.rows) {
      const bool op = row.e.kind == EventKind::kGemm;
      const uint64_t id =
          op ? position_of_cpu.at(row.e.cpu_ns) : static_cast<uint64_t>(row.e.correlation_id);
      EXPECT_GT(id, last) << "trial " << trial << ": out of correlation order";
      last = id;
      if (op) continue;
      const int parent_op = want_parent_op.at(id);
      const int64_t want =
          parent_op < 0 ? db::kUnset : seq_of_op.at(static_cast<size_t>(parent_op));
      EXPECT_EQ(row.e.parent_seq, want) << "trial " << trial << " kernel " << id;
    }
    EXPECT_EQ(rb.stats().placed_late, 0) << "trial " << trial;
  }
}

}  // namespace
}  // namespace detrace::tracer
