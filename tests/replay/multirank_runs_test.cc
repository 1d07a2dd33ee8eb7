// The multi-rank runs recorded on 2 H200s (tests/data/runs/tp2-nccl-*, tp4-ipc-racy-*; see
// golden_test.cc), beyond their goldens: what a user does with them next.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "detrace/db/run.h"
#include "detrace/replay/replay.h"

namespace detrace {
namespace {

std::string runPath(const char* name) { return fmt::format("{}/runs/{}", DETRACE_TEST_DATA_DIR, name); }

const replay::ImplResult* findImpl(const replay::ReplayResult& r, const std::string& name) {
  for (const auto& i : r.impls) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

// The planted all-reduce gave rank 3 different outputs from identical inputs in the two runs; every
// fixed-order alternative, replayed on each run's captured inputs (all 4 ranks' send buffers,
// gathered from 4 trace files), gives the same bits in both: the divergence is gone.
TEST(MultiRankRuns, FixedOrderReplayRemovesThePlantedDivergence) {
#if !DETRACE_TEST_HAVE_KERNELS
  GTEST_SKIP() << "built without kernels/: detrace replay is unavailable";
#endif
  auto a = db::Run::open(runPath("tp4-ipc-racy-a"));
  auto b = db::Run::open(runPath("tp4-ipc-racy-b"));
  ASSERT_TRUE(a.isOk()) << a.status().message();
  ASSERT_TRUE(b.isOk()) << b.status().message();
  ASSERT_EQ(a->ranks().size(), 4u);
  replay::ReplayOptions options;
  options.allow_gpu = false;
  options.repeat = 2;
  auto ra = replay::replayEvent(*a, {3, 51}, options);
  auto rb = replay::replayEvent(*b, {3, 51}, options);
  ASSERT_TRUE(ra.isOk()) << ra.status().message();
  ASSERT_TRUE(rb.isOk()) << rb.status().message();
  EXPECT_NE(ra->op.find("AllReduce"), std::string::npos) << ra->op;
  EXPECT_NE(ra->op.find("4 rank(s)"), std::string::npos) << ra->op;
  int compared = 0;
  for (const char* name : {"rank/cpu", "reversed/cpu", "ring1/cpu", "ring2/cpu", "ring3/cpu", "tree/cpu"}) {
    const replay::ImplResult* x = findImpl(*ra, name);
    const replay::ImplResult* y = findImpl(*rb, name);
    ASSERT_NE(x, nullptr) << name;
    ASSERT_NE(y, nullptr) << name;
    ASSERT_TRUE(x->ran() && y->ran()) << name;
    EXPECT_EQ(x->distinct, 1) << name;
    EXPECT_EQ(x->digest, y->digest) << name << ": the same inputs summed in a fixed order";
    EXPECT_EQ(x->matches_recorded, 0) << name << ": the recorded (racy) output is not a fixed order's";
    ++compared;
  }
  EXPECT_EQ(compared, 6);
  // The recorded outputs themselves differ between the runs (that is the planted defect).
  const replay::ImplResult* fa = findImpl(*ra, "rank/cpu");
  ASSERT_TRUE(fa->to_recorded.has_value());
  EXPECT_GT(fa->to_recorded->max_ulp, 0u);
}

// torchrun's agent process ran under the preload too; it is not a rank.
TEST(MultiRankRuns, TheLauncherIsNotARank) {
  auto r = db::Run::open(runPath("tp2-nccl-a"));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->ranks().size(), 2u);
  EXPECT_EQ(r->worldSize(), 2);
  EXPECT_EQ(r->idleFiles().size(), 1u);
  EXPECT_TRUE(r->missingRanks().empty());
}

}  // namespace
}  // namespace detrace
