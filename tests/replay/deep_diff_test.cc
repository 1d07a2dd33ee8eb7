// The deep window comparison (deep_diff.h) on synthetic runs (deep_synth.h) with fresh random
// programs and inputs: a racy launch planted at a random place must be named as the origin with
// the args it wrote, the launches that read what it changed as propagated, and the cases where no
// launch can be named (divergence before the window, launches that cannot be compared) must say so.
#include "detrace/replay/deep_diff.h"

#include <set>

#include <gtest/gtest.h>

#include "detrace/replay/diff.h"
#include "detrace/replay/diff_report.h"

#include "../db/test_util.h"
#include "deep_synth.h"

namespace detrace::replay {
namespace {

using testing::Rng;
using testing::TempDir;
using testing::deep::Launch;
using testing::deep::Param;
using testing::deep::Program;
using testing::deep::RunSpec;

constexpr const char* kKernels[] = {"rmsnorm_kernel", "gelu_kernel", "reduce_kernel", "copy_kernel",
                                    "softmax_kernel"};

// `n` raw kernels over `allocs` allocations, each reaching 1-4 of them and writing its last.
Program randomProgram(Rng& rng, int n, int allocs) {
  Program p;
  for (int i = 0; i < allocs; ++i) p.allocs.push_back(256 * rng.range(1, 64));
  for (int i = 0; i < n; ++i) {
    Launch l;
    l.kernel = kKernels[rng.range(0, 4)];
    int params = static_cast<int>(rng.range(1, 4));
    for (int j = 0; j < params; ++j) {
      l.params.push_back(
          {static_cast<int>(rng.range(0, allocs - 1)), fmt::format("arg{}", j), j + 1 == params});
    }
    p.launches.push_back(std::move(l));
  }
  return p;
}

struct Expected {
  std::vector<std::string> origin_args;  // the racy launch's targets that it wrote
  int64_t propagated = 0;                // in-window launches after it that reach diverged memory
  int64_t first_propagated = -1;         // launch index of the first
};

// What the deep diff must find when `racy` is the only racy launch and [from, to) the window.
Expected expectedOf(const Program& p, int racy, int from, int to) {
  Expected e;
  std::set<int> diverged;
  for (int i = racy; i < static_cast<int>(p.launches.size()); ++i) {
    const Launch& l = p.launches[static_cast<size_t>(i)];
    bool reads = std::any_of(l.params.begin(), l.params.end(),
                             [&](const Param& q) { return diverged.count(q.alloc); });
    if (i > racy && !reads) continue;
    if (i > racy && i >= from && i < to) {
      ++e.propagated;
      if (e.first_propagated < 0) e.first_propagated = i;
    }
    for (const Param& q : l.params) {
      if (q.writes) diverged.insert(q.alloc);
    }
  }
  for (const auto& [alloc, args] :
       testing::deep::targetsOf(p.launches[static_cast<size_t>(racy)])) {
    bool written = std::any_of(p.launches[static_cast<size_t>(racy)].params.begin(),
                               p.launches[static_cast<size_t>(racy)].params.end(),
                               [&](const Param& q) { return q.alloc == alloc && q.writes; });
    if (written) e.origin_args.push_back(args);
  }
  return e;
}

RunDiff diffPair(const Program& p, RunSpec a, RunSpec b) {
  TempDir tmp;
  b.b = true;
  EXPECT_TRUE(testing::deep::writeRun(tmp.file("a"), p, a).isOk());
  EXPECT_TRUE(testing::deep::writeRun(tmp.file("b"), p, b).isOk());
  auto ra = db::Run::open(tmp.file("a"));
  auto rb = db::Run::open(tmp.file("b"));
  EXPECT_TRUE(ra.isOk() && rb.isOk());
  auto d = diffRuns(*ra, *rb);
  EXPECT_TRUE(d.isOk()) << d.status().message();
  return d.isOk() ? *d : RunDiff{};
}

RunSpec deepSpec(uint64_t seed, int from, int to) {
  return RunSpec{false, from, to, fmt::format("launches:{}:{}", from, to), seed, {}};
}

TEST(DeepDiff, NamesThePlantedRacyLaunchWithTheArgsItWrote) {
  for (int trial = 0; trial < 8; ++trial) {
    Rng rng;
    SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
    Program p = randomProgram(rng, 40, 6);
    int racy = static_cast<int>(rng.range(5, 34));
    p.launches[static_cast<size_t>(racy)].racy = true;
    RunSpec spec = deepSpec(rng.u64(), 2, 38);
    RunDiff d = diffPair(p, spec, spec);
    ASSERT_EQ(d.ranks.size(), 1u);
    const RankDiff& rd = d.ranks[0];
    ASSERT_TRUE(rd.deep.has_value());
    const DeepDiff& deep = *rd.deep;
    Expected e = expectedOf(p, racy, 2, 38);
    EXPECT_EQ(deep.launches_a, 36);
    EXPECT_EQ(deep.compared, 36);
    EXPECT_FALSE(deep.before_window);
    ASSERT_TRUE(deep.origin.has_value());
    EXPECT_EQ(deep.origin->index, racy - 2);
    EXPECT_EQ(deep.origin->kernel, p.launches[static_cast<size_t>(racy)].kernel);
    EXPECT_EQ(deep.origin->differingArgs(), e.origin_args);
    EXPECT_EQ(deep.count(DeepStatus::kOrigin), 1);
    EXPECT_EQ(deep.count(DeepStatus::kPropagated), e.propagated);
    EXPECT_EQ(deep.count(DeepStatus::kClean), 36 - 1 - e.propagated);
    if (e.first_propagated >= 0) {
      ASSERT_TRUE(deep.first_propagated.has_value());
      EXPECT_EQ(deep.first_propagated->index, e.first_propagated - 2);
    }
    // The diff's first divergence is the same launch, and the verdict names it.
    ASSERT_TRUE(rd.first.has_value());
    EXPECT_EQ(rd.first->a, deep.origin->a);
    EXPECT_EQ(rd.first->status, PairStatus::kNondeterministic);
    std::string verdict = deepVerdictText(deep);
    EXPECT_NE(verdict.find(fmt::format("Divergence begins at kernel `{}`", deep.origin->kernel)),
              std::string::npos)
        << verdict;
  }
}

TEST(DeepDiff, DivergenceBeforeTheWindowIsSaidSo) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  Program p = randomProgram(rng, 20, 5);
  p.launches[3].racy = true;
  // The window's first launch reads what the racy one wrote.
  Param written = p.launches[3].params.back();
  p.launches[6].params.insert(p.launches[6].params.begin(), {written.alloc, "arg9", false});
  RunSpec spec = deepSpec(rng.u64(), 6, 20);
  RunDiff d = diffPair(p, spec, spec);
  ASSERT_TRUE(d.ranks.at(0).deep.has_value());
  const DeepDiff& deep = *d.ranks[0].deep;
  EXPECT_TRUE(deep.before_window);
  ASSERT_TRUE(deep.first_propagated.has_value());
  EXPECT_EQ(deep.first_propagated->index, 0);
  EXPECT_FALSE(deep.origin.has_value());
  std::string verdict = deepVerdictText(deep);
  EXPECT_NE(verdict.find("Divergence began before the deep window launches:6:20"),
            std::string::npos)
      << verdict;
}

// Memory that diverged outside the window (here: before it, in an allocation the window's first
// launches do not reach) is read inside it, and no launch there is an origin.
TEST(DeepDiff, DivergedMemoryWithoutAnOriginInTheWindowIsSaidSo) {
  Rng rng;
  auto p = [](int alloc, bool writes) { return Param{alloc, writes ? "arg1" : "arg0", writes}; };
  Program prog;
  prog.allocs = {4096, 4096, 1 << 20, 4096};
  prog.launches = {{"fill_kernel", {p(0, true)}, false, false, ""},
                   {"fill_kernel", {p(1, true)}, false, false, ""},
                   {"racy_kernel", {p(2, true)}, false, true, ""},
                   {"copy_kernel", {p(0, false), p(3, true)}, false, false, ""},
                   {"scale_kernel", {p(1, false), p(1, true)}, false, false, ""},
                   {"sum_kernel", {p(2, false), p(3, true)}, false, false, ""}};
  RunSpec spec = deepSpec(rng.u64(), 3, 6);
  RunDiff d = diffPair(prog, spec, spec);
  ASSERT_TRUE(d.ranks.at(0).deep.has_value());
  const DeepDiff& deep = *d.ranks[0].deep;
  EXPECT_FALSE(deep.before_window);
  EXPECT_FALSE(deep.origin.has_value());
  EXPECT_EQ(deep.count(DeepStatus::kClean), 2);
  ASSERT_TRUE(deep.first_propagated.has_value());
  EXPECT_EQ(deep.first_propagated->kernel, "sum_kernel");
  EXPECT_EQ(deep.first_propagated->differingArgs(), std::vector<std::string>{"arg0"});
  std::string verdict = deepVerdictText(deep);
  EXPECT_NE(verdict.find("No launch in the deep window launches:3:6 turned identical memory into "
                         "different memory, yet kernel `sum_kernel`"),
            std::string::npos)
      << verdict;
  EXPECT_NE(verdict.find("differed in arg0's allocation (1 MiB)"), std::string::npos) << verdict;
}

TEST(DeepDiff, LaunchesWhoseAllocationsDifferInSizeAreNotComparable) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  Program p = randomProgram(rng, 30, 6);
  RunSpec a = deepSpec(rng.u64(), 0, 30), b = a;
  b.sizes[2] = p.allocs[2] * 2;  // as between batch sizes
  int64_t reaching = 0;
  for (const Launch& l : p.launches) {
    reaching +=
        std::any_of(l.params.begin(), l.params.end(), [](const Param& q) { return q.alloc == 2; });
  }
  RunDiff d = diffPair(p, a, b);
  ASSERT_TRUE(d.ranks.at(0).deep.has_value());
  const DeepDiff& deep = *d.ranks[0].deep;
  EXPECT_EQ(deep.count(DeepStatus::kNotComparable), reaching);
  EXPECT_EQ(deep.count(DeepStatus::kClean), 30 - reaching);
  EXPECT_FALSE(deep.origin.has_value());
  if (reaching > 0) {
    EXPECT_NE(deepVerdictText(deep).find(fmt::format("{} of 30 launch pairs", reaching)),
              std::string::npos)
        << deepVerdictText(deep);
  }
}

TEST(DeepDiff, RunsWithoutDeepRecordsAreUnaffected) {
  Rng rng;
  RunSpec spec{false, 0, 0, "", rng.u64(), {}};
  RunDiff d = diffPair(testing::deep::toyLayer(), spec, spec);
  ASSERT_EQ(d.ranks.size(), 1u);
  EXPECT_FALSE(d.ranks[0].deep.has_value());
  ASSERT_TRUE(d.ranks[0].first.has_value());  // the second GEMM, through raw kernels
  EXPECT_EQ(d.ranks[0].first->status, PairStatus::kPropagated);
  EXPECT_EQ(formatDiff(d, {"a", "b"}).find("deep"), std::string::npos);
  EXPECT_EQ(diffJson(d, {"a", "b"}).dump().find("deep"), std::string::npos);
}

TEST(DeepDiff, OnlyOneRunWithDeepRecordsIsAWarning) {
  Rng rng;
  RunSpec deep = deepSpec(rng.u64(), 1, 5), plain = deep;
  plain.deep_to = 0;
  plain.window = "";
  RunDiff d = diffPair(testing::deep::toyLayer(), deep, plain);
  EXPECT_FALSE(d.ranks.at(0).deep.has_value());
  ASSERT_EQ(d.warnings.size(), 1u);
  EXPECT_NE(d.warnings[0].find("only run A has deep window records"), std::string::npos)
      << d.warnings[0];
}

DeepLaunch launch(std::vector<DeepTarget> targets) { return DeepLaunch{7, std::move(targets)}; }

TEST(DeepDiff, ClassifiesByPreThenPostDigests) {
  Rng rng;
  uint64_t x = rng.u64(), y = rng.u64() | 1, z = rng.u64();
  DeepTarget t0{0, "arg0,arg3+8", 4096, 0x1000, x, x};
  DeepTarget t1{1, "arg2", 8 << 20, 0x2000, z, y};
  DeepLaunch a = launch({t0, t1});
  EXPECT_EQ(classifyDeep(a, a).status, DeepStatus::kClean);
  DeepLaunch post = a;
  post.targets[1].post = y ^ 2;
  post.targets[1].address = 0x9000;  // addresses differ between runs: never compared
  DeepVerdict v = classifyDeep(a, post);
  EXPECT_EQ(v.status, DeepStatus::kOrigin);
  EXPECT_EQ(v.differing, std::vector<size_t>{1});
  DeepLaunch pre = post;
  pre.targets[0].pre = x ^ 4;
  v = classifyDeep(a, pre);
  EXPECT_EQ(v.status, DeepStatus::kPropagated);
  EXPECT_EQ(v.differing, std::vector<size_t>{0});
  DeepLaunch other_args = a, other_size = a, fewer = a;
  other_args.targets[0].args = "arg0";
  other_size.targets[1].bytes *= 2;
  fewer.targets.pop_back();
  for (const DeepLaunch* b : {&other_args, &other_size, &fewer}) {
    EXPECT_EQ(classifyDeep(a, *b).status, DeepStatus::kNotComparable);
  }
}

TEST(DeepDiff, GroupsOperandRowsIntoTargetsBySlot) {
  RankOps ops;
  ops.names = {"", "arg0,arg3+8", "arg2"};
  auto row = [](int32_t slot, int64_t name, db::OperandRole role, uint64_t digest) {
    db::Operand o;
    o.slot = slot;
    o.name = name;
    o.role = role;
    o.bytes = 4096;
    o.address = 0x1000 * (slot + 1);
    o.has_digest = true;
    o.digest = digest;
    return o;
  };
  DeepLaunch l = deepLaunchOf(
      ops, 5,
      {row(0, 1, db::OperandRole::kInput, 10), row(0, 1, db::OperandRole::kOutput, 11),
       row(1, 2, db::OperandRole::kInput, 20), row(1, 2, db::OperandRole::kOutput, 21)});
  ASSERT_EQ(l.targets.size(), 2u);
  EXPECT_EQ(l.targets[0].args, "arg0,arg3+8");
  EXPECT_EQ(l.targets[0].pre, 10u);
  EXPECT_EQ(l.targets[0].post, 11u);
  EXPECT_EQ(l.targets[1].args, "arg2");
  EXPECT_EQ(l.targets[1].address, 0x2000);
  EXPECT_EQ(l.targets[1].post, 21u);
}

TEST(DeepDiff, BytesText) {
  EXPECT_EQ(bytesText(512), "512 B");
  EXPECT_EQ(bytesText(8 << 20), "8 MiB");
  EXPECT_EQ(bytesText(1536), "1.5 KiB");
  EXPECT_EQ(bytesText(int64_t{3} << 30), "3 GiB");
}

}  // namespace
}  // namespace detrace::replay
