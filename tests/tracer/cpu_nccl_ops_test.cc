// The LD_PRELOAD seam on NCCL's groups (the order NCCL reports their choices in, splits in a
// simulated group, a group the program never ends), Gather and Scatter, and custom reduction operators:
// tests/tracer/nccl_group_order_app (linked against the fake libnccl) recorded as two ranks by
// `detrace record`.
#include <bit>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"

namespace detrace {
namespace {

using testing::TempDir;

// One rank's recording: its collectives in seq order and its stats.
struct RankTrace {
  std::vector<db::Collective> collectives;
  std::vector<std::string> protos;
  std::map<std::string, int64_t> stats;
  bool finished = false;
};

// nccl_group_order_app run as ranks 0 and 1 in `mode` under `detrace record` (`env` set for it,
// e.g. the fake NCCL's switches): the recorder's output, and each rank's trace (empty where it
// could not be read: the test has failed then).
std::vector<RankTrace> recordApp(TempDir& tmp, const std::string& mode, std::string* out,
                                 const std::string& env = "") {
  const std::string run = tmp.file("run");
  const std::string app = fmt::format("{}/tests/nccl_group_order_app", DETRACE_BINARY_DIR);
  const testing::ShellOutput o = testing::runShell(fmt::format("{} {} record -o {} -- /bin/sh -c '{} 0 {} & {} 1 {}; wait'",
                                                               env, testing::detraceExe(), run, app, mode, app, mode));
  *out = o.out;
  EXPECT_EQ(o.status, 0) << o.out;
  std::vector<RankTrace> ranks;
  auto r = db::Run::open(run);
  EXPECT_TRUE(r.isOk()) << (r.isOk() ? "" : r.status().message()) << o.out;
  if (!r.isOk()) return ranks;
  EXPECT_EQ(r->ranks().size(), 2u) << o.out;
  for (const auto& rank : r->ranks()) {
    auto reader = r->openRank(rank.rank);
    EXPECT_TRUE(reader.isOk());
    if (!reader.isOk()) continue;
    db::TraceReader& t = **reader;
    auto colls = t.collectives();
    auto stats = t.stats();
    EXPECT_TRUE(colls.isOk() && stats.isOk());
    if (!colls.isOk() || !stats.isOk()) continue;
    RankTrace rt;
    for (const auto& [seq, c] : *colls) {
      rt.collectives.push_back(c);
      rt.protos.push_back(t.str(c.proto));
    }
    rt.stats = *stats;
    rt.finished = t.finished();
    ranks.push_back(std::move(rt));
  }
  return ranks;
}

int64_t stat(const RankTrace& t, const std::string& key) {
  auto it = t.stats.find(key);
  return it == t.stats.end() ? 0 : it->second;
}

// NCCL reports a group's collectives to the profiler plugin in its plan's order (by size), not in
// call order (the fake does so with FAKE_NCCL_PLAN_ORDER=1): each call still gets its own choices,
// matched by buffers and count (the fake picks LL up to 1024 elements, Simple above). Before, they
// were handed out in call order, and the two calls' protocols were swapped.
TEST(RecordSeam, AGroupsChoicesGoToTheirOwnCallsWhateverOrderNcclReportsThem) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "", &out, "FAKE_NCCL_PLAN_ORDER=1");
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    const std::vector<db::Collective>& colls = t.collectives;
    ASSERT_EQ(colls.size(), 2u);
    EXPECT_EQ(colls[0].count, 4096);
    EXPECT_EQ(t.protos[0], "Simple");
    EXPECT_EQ(colls[1].count, 16);
    EXPECT_EQ(t.protos[1], "LL");
  }
}

// NCCL runs a simulated group's splits (ncclGroupSimulateEnd skips only the launches): the
// communicator made there is followed, and its calls carry its id and sequence numbers.
TEST(RecordSeam, ASplitInASimulatedGroupIsFollowed) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "simsplit", &out, "FAKE_NCCL_SIM_RUNS_JOBS=1");
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    const std::vector<db::Collective>& colls = t.collectives;
    ASSERT_EQ(colls.size(), 1u);
    EXPECT_NE(colls[0].comm_id, db::kUnset) << "the split's communicator was not followed";
    EXPECT_NE(colls[0].comm_id, 0);
    EXPECT_EQ(colls[0].comm_seq, 0);
    EXPECT_EQ(colls[0].comm_nranks, 2);
  }
}

// NCCL 2.28's ncclGather and ncclScatter are recorded, numbered with the other calls on their
// communicator.
TEST(RecordSeam, GatherAndScatterAreRecorded) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "gather", &out);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    const std::vector<db::Collective>& colls = t.collectives;
    ASSERT_EQ(colls.size(), 4u);
    const std::vector<db::CollOp> ops{colls[0].op, colls[1].op, colls[2].op, colls[3].op};
    EXPECT_EQ(ops, (std::vector<db::CollOp>{db::CollOp::kAllReduce, db::CollOp::kGather, db::CollOp::kScatter,
                                            db::CollOp::kAllReduce}));
    for (size_t i = 0; i < colls.size(); ++i) EXPECT_EQ(colls[i].comm_seq, static_cast<int64_t>(i));
    EXPECT_EQ(colls[1].root, 0);
  }
}

// A collective using an operator made by ncclRedOpCreatePreMulSum is recorded as premulsum, with
// the scalar NCCL read on the host at the operator's creation, none for one in device memory; a
// number handed out again after ncclRedOpDestroy carries its new operator's scalar; an operator
// made where the tracer did not see it is recorded as an unknown custom operator, counted and said.
TEST(RecordSeam, PreMulSumOperatorsAreRecordedWithTheirScalars) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "premulsum", &out);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    const std::vector<db::Collective>& c = t.collectives;
    ASSERT_EQ(c.size(), 5u);
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].comm_seq, static_cast<int64_t>(i));
    EXPECT_EQ(c[0].redop, db::RedOp::kPreMulSum);
    EXPECT_TRUE(c[0].has_redop_scalar);
    EXPECT_EQ(c[0].redop_scalar, std::bit_cast<uint32_t>(0.25f));
    EXPECT_EQ(db::redOpText(c[0]), "premulsum(0.25)");
    EXPECT_EQ(c[1].redop, db::RedOp::kPreMulSum);
    EXPECT_FALSE(c[1].has_redop_scalar) << "a scalar in device memory is not read";
    EXPECT_EQ(db::redOpText(c[1]), "premulsum(unrecorded scalar)");
    EXPECT_EQ(c[2].redop, db::RedOp::kPreMulSum);
    EXPECT_TRUE(c[2].has_redop_scalar);
    EXPECT_EQ(c[2].redop_scalar, std::bit_cast<uint32_t>(2.0f)) << "the destroyed operator's scalar stuck";
    EXPECT_EQ(c[3].redop, db::RedOp::kUnknownCustom);
    EXPECT_FALSE(c[3].has_redop_scalar);
    EXPECT_EQ(db::redOpText(c[3]), "unknown custom op");
    EXPECT_EQ(c[4].redop, db::RedOp::kSum);
    EXPECT_FALSE(c[4].has_redop_scalar);
    EXPECT_EQ(stat(t, "nccl_redops_unknown"), 1);
    EXPECT_EQ(stat(t, "nccl_redops_untracked"), 0);
  }
  EXPECT_NE(out.find("reduction operator (6) that is neither built in nor one the tracer saw made"), std::string::npos) << out;
}

// A group the program never ends (it exits with it open): the first 4096 calls wait for its end,
// the rest are recorded complete at once and counted; every call keeps its number, the trace is
// finished at exit (the waiting calls written as they are), and the program exits normally.
TEST(RecordSeam, AGroupNeverEndedStaysBoundedAndTheTraceIsFinished) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "unclosed", &out);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    EXPECT_TRUE(t.finished);
    ASSERT_EQ(t.collectives.size(), 4196u);
    for (size_t i = 0; i < t.collectives.size(); ++i) {
      ASSERT_EQ(t.collectives[i].comm_seq, static_cast<int64_t>(i));
      ASSERT_EQ(t.collectives[i].group_id, t.collectives[0].group_id);
    }
    EXPECT_NE(t.collectives[0].group_id, db::kUnset);
    EXPECT_EQ(stat(t, "nccl_group_calls_past_cap"), 100);
    // Only the calls held for the group's end were written incomplete (at exit, or after the
    // reorder buffer's timeout); those past the bound were complete when recorded.
    EXPECT_EQ(stat(t, "tracer_slots_incomplete_at_exit") + stat(t, "tracer_slots_timed_out"), 4096);
  }
  EXPECT_NE(out.find("holds more than 4096 calls"), std::string::npos) << out;
}

// The same group ended late: the calls it held are completed with NCCL's choices, those past the
// bound have none; the call after it is numbered on and settled as usual.
TEST(RecordSeam, AGroupEndedPastTheBoundCompletesTheCallsItHeld) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "late", &out);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    ASSERT_EQ(t.collectives.size(), 4197u);
    for (size_t i = 0; i < t.collectives.size(); ++i) {
      ASSERT_EQ(t.collectives[i].comm_seq, static_cast<int64_t>(i));
      ASSERT_EQ(t.protos[i], i < 4096 || i == 4196 ? "LL" : "") << i;  // the fake: LL up to 1024 elements
    }
    EXPECT_NE(t.collectives[4195].group_id, db::kUnset);
    EXPECT_EQ(t.collectives[4196].group_id, db::kUnset);
    EXPECT_EQ(stat(t, "nccl_group_calls_past_cap"), 100);
  }
}

// A group of 300 all-reduces on buffers of their own, called in descending size, which NCCL
// reports ascending, with 200 sends and receives among them: every call gets its own choice (the
// protocol the fake picks by size, its channels), matched by buffers, not by order.
TEST(RecordSeam, AGroupOfManyCallsReportedOutOfOrderGivesEachItsOwnChoice) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "manysizes", &out, "FAKE_NCCL_PLAN_ORDER=1");
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    ASSERT_EQ(t.collectives.size(), 500u);
    int colls = 0, p2p = 0;
    for (size_t i = 0; i < t.collectives.size(); ++i) {
      const db::Collective& c = t.collectives[i];
      SCOPED_TRACE(fmt::format("call {} of {} elements", i, c.count));
      if (c.op == db::CollOp::kSend || c.op == db::CollOp::kRecv) {
        ++p2p;
        EXPECT_EQ(c.channels, 3);
        continue;
      }
      ++colls;
      ASSERT_EQ(c.op, db::CollOp::kAllReduce);
      EXPECT_EQ(t.protos[i], c.count <= 1024 ? "LL" : "Simple");
      EXPECT_EQ(c.channels, 2);
    }
    EXPECT_EQ(colls, 300);
    EXPECT_EQ(p2p, 200);
  }
}

// The same group only simulated (ncclGroupSimulateEnd): the calls it held are discarded, those
// past the bound stay in the trace as if they had run and are counted as such, and every number
// the group took is given back, so that the real all-reduce after it carries 0 as on a rank that
// simulated nothing.
TEST(RecordSeam, AGroupSimulatedPastTheBoundGivesItsNumbersBack) {
  TempDir tmp;
  std::string out;
  const std::vector<RankTrace> ranks = recordApp(tmp, "simlong", &out);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankTrace& t : ranks) {
    ASSERT_EQ(t.collectives.size(), 101u);
    for (size_t i = 0; i < 100; ++i) {
      EXPECT_EQ(t.collectives[i].comm_seq, static_cast<int64_t>(4096 + i));
    }
    EXPECT_EQ(t.collectives[100].group_id, db::kUnset);
    EXPECT_EQ(t.collectives[100].comm_seq, 0) << "the simulated group's numbers given back";
    EXPECT_EQ(stat(t, "nccl_group_calls_past_cap"), 100);
    EXPECT_EQ(stat(t, "nccl_simulated_calls_written"), 100);
  }
}

}  // namespace
}  // namespace detrace
