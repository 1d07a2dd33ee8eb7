// detrace replay on the CPU: distances (ULPs per dtype on hand-checked values), and replays of
// synthetic runs whose recorded outputs were made with known summation orders, so the replay must
// name exactly the implementation that reproduces them. GPU rows are skipped here (--no-gpu).
#include <sqlite3.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <algorithm>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "detrace/replay/bisect.h"
#include "detrace/replay/replay.h"
#include "detrace/replay/replay_metrics.h"

#if DETRACE_TEST_HAVE_KERNELS
#include "replay_synth.h"
#endif

namespace detrace {
namespace {

using replay::Distance;
using replay::OutputShape;

std::vector<uint8_t> bytesOf(const std::vector<uint16_t>& words) {
  std::vector<uint8_t> b(words.size() * 2);
  std::memcpy(b.data(), words.data(), b.size());
  return b;
}

TEST(ReplayMetrics, UlpDistanceBf16) {
  using db::DType;
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x3f80, 0x3f80), 0u);   // 1.0
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x3f80, 0x3f81), 1u);   // 1.0 vs 1.0078125
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x3f7f, 0x3f80), 1u);   // across an exponent
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x0000, 0x8000), 0u);   // +0 vs -0
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x0001, 0x8001), 2u);   // +-smallest subnormal
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x3f80, 0xbf80), 2u * 0x3f80);  // 1 vs -1
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x7fc0, 0x3f80), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x7fc0, 0xffc1), 0u);   // NaN vs NaN
  EXPECT_EQ(replay::ulpDistance(DType::kBF16, 0x7f7f, 0x7f80), 1u);   // max finite vs inf
}

TEST(ReplayMetrics, UlpDistanceF16AndF32) {
  using db::DType;
  EXPECT_EQ(replay::ulpDistance(DType::kF16, 0x3c00, 0x4000), 1024u);  // 1.0 vs 2.0: 2^10 steps
  EXPECT_EQ(replay::ulpDistance(DType::kF16, 0x3c00, 0x3c01), 1u);
  EXPECT_EQ(replay::ulpDistance(DType::kF16, 0x7e00, 0x3c00), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(replay::ulpDistance(DType::kF32, 0x3f800000, 0x3f800001), 1u);
  EXPECT_EQ(replay::ulpDistance(DType::kF32, 0x3f800000, 0x40000000), uint64_t{1} << 23);
  EXPECT_EQ(replay::ulpDistance(DType::kF32, 0x80000000, 0x00000000), 0u);
  EXPECT_EQ(replay::ulpDistance(DType::kF32, 0xbf800000, 0x3f800000), 2u * 0x3f800000u);
}

TEST(ReplayMetrics, CompareOutputs) {
  // bf16: 1.0, 2.0, -0.5, 0, NaN against 1.0078125, 2.0, -0.5, -0, 1.0.
  const OutputShape shape{db::DType::kBF16, 1, 5};
  const auto x = bytesOf({0x3f81, 0x4000, 0xbf00, 0x0000, 0x7fc0});
  const auto ref = bytesOf({0x3f80, 0x4000, 0xbf00, 0x8000, 0x3f80});
  const Distance d = replay::compareOutputs(shape, x, ref);
  EXPECT_EQ(d.differing, 3);  // element 3 differs in bits though equal in value
  EXPECT_EQ(d.nan_mismatch, 1);
  EXPECT_EQ(d.max_ulp, 1u);
  EXPECT_EQ(d.worst, 0);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.0078125);
  EXPECT_DOUBLE_EQ(d.max_rel, 0.0078125);
  EXPECT_TRUE(replay::compareOutputs(shape, ref, ref).identical());
}

TEST(ReplayMetrics, RelativeDistanceHasAFloor) {
  // A reference of 0 next to large values: rel is |x - 0| / (1e-2 * rms(ref)).
  const OutputShape shape{db::DType::kF32, 1, 2};
  const float xs[2] = {1e-3f, 100.0f}, refs[2] = {0.0f, 100.0f};
  std::vector<uint8_t> x(8), ref(8);
  std::memcpy(x.data(), xs, 8);
  std::memcpy(ref.data(), refs, 8);
  const Distance d = replay::compareOutputs(shape, x, ref);
  const double floor = 1e-2 * std::sqrt(100.0 * 100.0 / 2.0);
  EXPECT_NEAR(d.max_rel, static_cast<double>(1e-3f) / floor, 1e-12);
}

TEST(ReplayMetrics, CompareToExact) {
  const OutputShape shape{db::DType::kBF16, 1, 3};
  const std::vector<double> exact = {1.0, 1.00390625, -3.0};  // 1 + 2^-8 is a bf16 tie
  const auto rounded = replay::roundExact(exact, db::DType::kBF16);
  EXPECT_EQ(rounded, bytesOf({0x3f80, 0x3f80, 0xc040}));  // the tie goes to even
  const Distance d = replay::compareToExact(shape, rounded, exact);
  EXPECT_EQ(d.differing, 0);
  EXPECT_EQ(d.max_ulp, 0u);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.00390625);
}

#if DETRACE_TEST_HAVE_KERNELS

namespace synth = testing::synth;
using replay::ImplResult;
using testing::TempDir;

const ImplResult* find(const replay::ReplayResult& r, const std::string& name) {
  for (const auto& i : r.impls) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

replay::ReplayOptions cpuOnly(int repeat = 3) {
  replay::ReplayOptions o;
  o.allow_gpu = false;
  o.repeat = repeat;
  return o;
}

// A one-rank run with one GEMM (event 0) recorded as `spec` says, from random inputs.
db::Run gemmRun(const TempDir& dir, const synth::GemmSpec& spec, uint32_t seed,
                bool capture_d = true) {
  std::mt19937 rng(seed);
  synth::GemmData data;
  const int64_t a_rows = spec.trans_a ? spec.k : spec.m, a_cols = spec.trans_a ? spec.m : spec.k;
  const int64_t b_rows = spec.trans_b ? spec.n : spec.k, b_cols = spec.trans_b ? spec.k : spec.n;
  data.a = synth::randomBf16(rng, synth::extentElems(a_rows, a_cols, spec.lda));
  data.b = synth::randomBf16(rng, synth::extentElems(b_rows, b_cols, spec.ldb));
  data.d = synth::computeD(spec, data.a, data.b);
  auto w = db::TraceWriter::create(dir.file("proc-1.dtrace"));
  EXPECT_TRUE(w.isOk()) << w.status().message();
  (*w)->setRank({0, 1, 0, 0, 1, "h", "GPU", ""});
  synth::appendGemm(**w, spec, data, true, capture_d);
  EXPECT_TRUE((*w)->close().isOk());
  auto run = db::Run::open(dir.path().string());
  EXPECT_TRUE(run.isOk()) << run.status().message();
  return std::move(*run);
}

TEST(ReplayGemm, FindsTheSequentialFp32Sum) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  synth::GemmSpec spec;
  spec.n = 5;
  db::Run run = gemmRun(dir, spec, rng.seed());
  auto r = replay::replayEvent(run, {0, 0}, cpuOnly());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->kind, "gemm");
  EXPECT_EQ(r->recorded, "captured D");
  EXPECT_EQ(r->output.rows, 5);
  EXPECT_EQ(r->output.cols, 64);
  EXPECT_TRUE(r->notes.empty());
  const ImplResult* fp32 = find(*r, "cpu-fp32");
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(fp32->runs, 3);
  EXPECT_EQ(fp32->distinct, 1);
  EXPECT_EQ(fp32->matches_recorded, 3);
  ASSERT_TRUE(fp32->to_recorded);
  EXPECT_TRUE(fp32->to_recorded->identical());
  ASSERT_TRUE(fp32->to_reference);
  EXPECT_GT(fp32->to_reference->max_abs, 0.0);
  const ImplResult* fp64 = find(*r, "fp64");
  ASSERT_NE(fp64, nullptr);
  EXPECT_EQ(fp64->runs, 1);
  EXPECT_EQ(fp64->matches_recorded, 0);
  EXPECT_GT(fp64->to_recorded->max_ulp, 0u);
  EXPECT_EQ(fp64->to_reference->differing, 0);
  EXPECT_EQ(r->reproducing(), std::vector<std::string>{"cpu-fp32"});
  for (const char* gpu : {"recorded", "cublaslt-heuristic", "cublaslt-pinned", "wgmma", "mma-sync",
                          "planted-splitk"}) {
    const ImplResult* i = find(*r, gpu);
    ASSERT_NE(i, nullptr) << gpu;
    EXPECT_EQ(i->skipped, "--no-gpu");
    EXPECT_FALSE(i->ran());
  }
}

TEST(ReplayGemm, SplitKRecordingIsNotReproducedByTheSequentialSum) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  synth::GemmSpec spec;
  spec.split = 4;
  db::Run run = gemmRun(dir, spec, rng.seed());
  auto r = replay::replayEvent(run, {0, 0}, cpuOnly(2));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_TRUE(r->reproducing().empty());
  EXPECT_EQ(find(*r, "cpu-fp32")->matches_recorded, 0);
  EXPECT_EQ(find(*r, "cpu-fp32")->distinct, 1);
}

TEST(ReplayGemm, RepacksOtherLayouts) {
  // NT with padded leading dimensions: A stored m x k (lda m+8), B stored n x k (ldb n+3),
  // D with ldd m+16, bf16 output.
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  synth::GemmSpec spec;
  spec.m = 24;
  spec.n = 6;
  spec.k = 40;
  spec.trans_a = false;
  spec.trans_b = true;
  spec.lda = spec.m + 8;
  spec.ldb = spec.n + 3;
  spec.ldd = spec.m + 16;
  spec.d_dtype = db::DType::kBF16;
  db::Run run = gemmRun(dir, spec, rng.seed());
  auto r = replay::replayEvent(run, {0, 0}, cpuOnly(1));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->output.rows, 6);
  EXPECT_EQ(r->output.cols, 24);
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("repacked"), std::string::npos) << r->notes[0];
  EXPECT_EQ(find(*r, "cpu-fp32")->matches_recorded, 1);
}

// A cuBLASLt epilogue's operands (the tracer's "bias" and "aux") say that the recorded D is more
// than A·B: the report says replay leaves the epilogue out.
TEST(ReplayGemm, AnEpilogueOperandIsNamedInTheNotes) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  synth::GemmSpec spec;
  spec.bias = true;
  db::Run run = gemmRun(dir, spec, rng.seed());
  auto r = replay::replayEvent(run, {0, 0}, cpuOnly(1));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("epilogue"), std::string::npos) << r->notes[0];
}

// With the epilogue recorded, the note names it; a GEMM recorded without one has no such note.
TEST(ReplayGemm, ARecordedEpilogueIsNamedInTheNotes) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  for (int32_t epilogue : {36, 1}) {  // CUBLASLT_EPILOGUE_GELU_BIAS, DEFAULT
    SCOPED_TRACE(epilogue);
    TempDir dir;
    synth::GemmSpec spec;
    spec.bias = epilogue != 1;
    spec.epilogue = epilogue;
    db::Run run = gemmRun(dir, spec, rng.seed());
    auto r = replay::replayEvent(run, {0, 0}, cpuOnly(1));
    ASSERT_TRUE(r.isOk()) << r.status().message();
    size_t named = 0;
    for (const std::string& n : r->notes) named += n.find("epilogue") != std::string::npos;
    if (epilogue == 1) {
      EXPECT_EQ(named, 0u);
    } else {
      ASSERT_EQ(r->notes.size(), 1u);
      EXPECT_NE(r->notes[0].find("the cuBLASLt epilogue gelu_bias"), std::string::npos) << r->notes[0];
    }
  }
}

TEST(ReplayGemm, ComparesDigestsWhenTheOutputWasNotCaptured) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = gemmRun(dir, synth::GemmSpec{}, rng.seed(), /*capture_d=*/false);
  auto r = replay::replayEvent(run, {0, 0}, cpuOnly(2));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->recorded, "digest of D");
  const ImplResult* fp32 = find(*r, "cpu-fp32");
  EXPECT_EQ(fp32->matches_recorded, 2);
  EXPECT_FALSE(fp32->to_recorded.has_value());  // digests give no distance
  EXPECT_TRUE(fp32->to_reference.has_value());
  EXPECT_EQ(find(*r, "fp64")->matches_recorded, 0);
}

// Captured bytes that no longer give the fingerprint recorded with them (damaged since) are an
// error naming the operand, not a replay on wrong inputs whose verdict would mislead.
TEST(ReplayGemm, ACaptureThatDoesNotGiveItsFingerprintIsDamaged) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = gemmRun(dir, synth::GemmSpec{}, rng.seed());
  ASSERT_TRUE(replay::replayEvent(run, {0, 0}, cpuOnly(1)).isOk());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("proc-1.dtrace").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE operands SET digest = ~digest WHERE seq = 0 AND slot = 0", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto damaged = db::Run::open(dir.path().string());
  ASSERT_TRUE(damaged.isOk()) << damaged.status().message();
  auto r = replay::replayEvent(*damaged, {0, 0}, cpuOnly(1));
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("do not give the fingerprint recorded with them"), std::string::npos)
      << r.status().message();
}

// A `world`-rank run with one collective (event 0) whose recorded recv is `order` from `start`.
db::Run collectiveRun(const TempDir& dir, db::CollOp op, int world, int64_t count,
                      kernels::ReduceOrder order, int start, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t send_count = op == db::CollOp::kReduceScatter ? count * world : count;
  std::vector<synth::Bytes> sends = synth::cancellingSends(rng, world, send_count);
  const synth::Bytes sum = synth::reduceInOrder(sends, order, start);
  for (int r = 0; r < world; ++r) {
    auto w = db::TraceWriter::create(dir.file(fmt::format("proc-{}.dtrace", 10 + r)));
    EXPECT_TRUE(w.isOk());
    (*w)->setRank({r, world, r, r, 10 + r, "h", "GPU", ""});
    synth::CollSpec c;
    c.op = op;
    c.count = count;
    c.rank = r;
    c.nranks = world;
    synth::Bytes recv = sum;
    if (op == db::CollOp::kReduceScatter) {
      recv.assign(sum.begin() + r * count * 2, sum.begin() + (r + 1) * count * 2);
    }
    synth::appendCollective(**w, c, sends[static_cast<size_t>(r)], recv, true);
    EXPECT_TRUE((*w)->close().isOk());
  }
  auto run = db::Run::open(dir.path().string());
  EXPECT_TRUE(run.isOk()) << run.status().message();
  return std::move(*run);
}

TEST(ReplayCollective, FindsTheRingOrderOfAnAllReduce) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = collectiveRun(dir, db::CollOp::kAllReduce, 4, 4096, kernels::ReduceOrder::kRing, 2,
                              rng.seed());
  for (int rank = 0; rank < 4; ++rank) {
    auto r = replay::replayEvent(run, {rank, 0}, cpuOnly(2));
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r->reproducing(), std::vector<std::string>{"ring2/cpu"}) << "rank " << rank;
    std::vector<std::string> names;
    for (const auto& i : r->impls) names.push_back(i.name);
    EXPECT_EQ(names, (std::vector<std::string>{
                         "rank/gpu", "rank/cpu", "reversed/gpu", "reversed/cpu", "ring1/gpu",
                         "ring1/cpu", "ring2/gpu", "ring2/cpu", "ring3/gpu", "ring3/cpu",
                         "tree/gpu", "tree/cpu", "nccl", "det-allreduce", "planted-racy", "fp64"}));
    for (const auto& i : r->impls) {
      if (!i.ran()) continue;
      EXPECT_EQ(i.distinct, 1) << i.name;
      if (i.name != "ring2/cpu") {
        EXPECT_GT(i.to_recorded->max_ulp, 0u) << i.name;
      }
    }
    EXPECT_TRUE(find(*r, "planted-racy")->control);
  }
}

TEST(ReplayCollective, ReduceScatterReplaysTheRanksSegment) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = collectiveRun(dir, db::CollOp::kReduceScatter, 3, 2048,
                              kernels::ReduceOrder::kReversed, 0, rng.seed());
  auto r = replay::replayEvent(run, {1, 0}, cpuOnly(1));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->output.elements(), 2048);
  // The recorded order reproduces rank 1's segment. Another order may round to the same bits on
  // some seeds (3 ranks: few distinct association orders), but not every order does.
  std::vector<std::string> reproducing = r->reproducing();
  EXPECT_NE(std::find(reproducing.begin(), reproducing.end(), "reversed/cpu"), reproducing.end());
  EXPECT_EQ(std::find(reproducing.begin(), reproducing.end(), "rank/cpu"), reproducing.end());
}

TEST(ReplayCollective, OrdersEqualUpToCommutativityAreListedOnce) {
  testing::Rng rng;
  TempDir dir;
  db::Run run = collectiveRun(dir, db::CollOp::kAllReduce, 2, 256, kernels::ReduceOrder::kRankOrder,
                              0, rng.seed());
  auto r = replay::replayEvent(run, {0, 0}, cpuOnly(1));
  ASSERT_TRUE(r.isOk());
  std::vector<std::string> names;
  for (const auto& i : r->impls) names.push_back(i.name);
  EXPECT_EQ(names, (std::vector<std::string>{"rank/gpu", "rank/cpu", "nccl", "det-allreduce",
                                             "planted-racy", "fp64"}));
  EXPECT_EQ(find(*r, "rank/cpu")->matches_recorded, 1);
  EXPECT_EQ(find(*r, "fp64")->matches_recorded, 1);  // two bf16 summed in fp32: exact, then rounded
}

TEST(ReplaySelect, ImplListSelectsByNamePrefixGlobAndGroup) {
  testing::Rng rng;
  TempDir dir;
  db::Run run = collectiveRun(dir, db::CollOp::kAllReduce, 4, 64, kernels::ReduceOrder::kTree, 0,
                              rng.seed());
  auto names = [&](std::vector<std::string> impls) {
    replay::ReplayOptions o = cpuOnly(1);
    o.impls = std::move(impls);
    auto r = replay::replayEvent(run, {0, 0}, o);
    std::vector<std::string> out;
    if (!r.isOk()) return std::vector<std::string>{"error: " + r.status().message()};
    for (const auto& i : r->impls) out.push_back(i.name);
    return out;
  };
  EXPECT_EQ(names({"ring2", "fp64"}), (std::vector<std::string>{"ring2/gpu", "ring2/cpu", "fp64"}));
  EXPECT_EQ(names({"ring*/cpu"}), (std::vector<std::string>{"ring1/cpu", "ring2/cpu", "ring3/cpu"}));
  EXPECT_EQ(names({"controls"}), std::vector<std::string>{"planted-racy"});
  EXPECT_EQ(names({"gpu"}).size(), 9u);  // 6 orders, nccl, det-allreduce, planted-racy
  const auto bad = names({"ring9"});
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("--impl ring9: no such implementation"), std::string::npos) << bad[0];
  EXPECT_NE(bad[0].find("tree/cpu"), std::string::npos) << bad[0];
  // With a token that did select something, the list still names every implementation.
  const auto mixed = names({"fp64", "ring9"});
  ASSERT_EQ(mixed.size(), 1u);
  EXPECT_NE(mixed[0].find("it has: rank/gpu, rank/cpu,"), std::string::npos) << mixed[0];
  EXPECT_NE(mixed[0].find("fp64"), std::string::npos) << mixed[0];
}

// The committed toy run (replay_synth.h): 3 ranks, a step at 4 tokens (events 0-5) and one at 8
// tokens (events 6-11).
class ReplayToy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    ASSERT_TRUE(synth::writeToyRun(dir_->path().string(), {synth::toyBs4(), synth::toyBs8()}).isOk());
  }
  static void TearDownTestSuite() { delete dir_; }
  static db::Run open() {
    auto r = db::Run::open(dir_->path().string());
    EXPECT_TRUE(r.isOk()) << r.status().message();
    return std::move(*r);
  }
  static TempDir* dir_;
};
TempDir* ReplayToy::dir_ = nullptr;

TEST_F(ReplayToy, GemmPairIsInvariantWithTheCpuSumsButNotAsRecorded) {
  db::Run run = open();
  auto p = replay::replayPair(run, {0, 1}, run, {0, 7}, cpuOnly(2));
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(p->rows, (std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {1, 2}, {2, 7}, {3, 0}}));
  ASSERT_TRUE(p->recorded_rows_equal);
  EXPECT_EQ(*p->recorded_rows_equal, 0);  // split-K at 4 tokens, sequential at 8
  for (const auto& i : p->impls) {
    if (i.gpu) {
      EXPECT_EQ(i.skipped, "--no-gpu") << i.name;
    } else {
      EXPECT_TRUE(i.invariant()) << i.name;
      EXPECT_EQ(i.rows, 4) << i.name;
    }
  }
  EXPECT_TRUE(p->a.reproducing().empty());  // nothing on the CPU sums in split-K 2
  EXPECT_EQ(p->b.reproducing(), std::vector<std::string>{"cpu-fp32"});
}

TEST_F(ReplayToy, AllReducePairFindsTheRowsAcrossAllRanks) {
  db::Run run = open();
  auto p = replay::replayPair(run, {2, 8}, run, {2, 2}, cpuOnly(1));  // larger one first
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(p->rows, (std::vector<std::pair<int64_t, int64_t>>{{5, 0}, {2, 1}, {7, 2}, {0, 3}}));
  ASSERT_TRUE(p->recorded_rows_equal);
  EXPECT_LT(*p->recorded_rows_equal, 4);  // reversed at 8 tokens, ring from rank 2 at 4
  EXPECT_EQ(p->a.reproducing(), std::vector<std::string>{"reversed/cpu"});
  EXPECT_EQ(p->b.reproducing(), std::vector<std::string>{"ring2/cpu"});
  for (const auto& i : p->impls) {
    if (!i.gpu) {
      EXPECT_TRUE(i.invariant()) << i.name;
    }
  }
}

TEST_F(ReplayToy, ErrorsSayWhatToRecord) {
  db::Run bs4 = open();
  auto not_captured = replay::replayEvent(bs4, {0, 4}, cpuOnly());
  ASSERT_FALSE(not_captured.isOk());
  const std::string& m = not_captured.status().message();
  EXPECT_NE(m.find("has no captured bytes for operands A and B"), std::string::npos) << m;
  EXPECT_NE(m.find("recorded with --capture full, but these bytes were not copied"),
            std::string::npos) << m;
  EXPECT_NE(m.find("--capture full --capture-ops gemm --capture-range 2"), std::string::npos) << m;
  EXPECT_NE(m.find("-- python toy_tp.py --tokens 4,8"), std::string::npos) << m;

  auto kernel = replay::replayEvent(bs4, {0, 0}, cpuOnly());
  ASSERT_FALSE(kernel.isOk());
  EXPECT_NE(kernel.status().message().find("is a kernel (embedding)"), std::string::npos)
      << kernel.status().message();
  auto gather = replay::replayEvent(bs4, {0, 5}, cpuOnly());
  ASSERT_FALSE(gather.isOk());
  EXPECT_NE(gather.status().message().find("AllGather, which moves bytes"), std::string::npos)
      << gather.status().message();
  auto no_event = replay::replayEvent(bs4, {0, 99}, cpuOnly());
  EXPECT_EQ(no_event.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(no_event.status().message().find("no event 99 (events 0 to 11)"), std::string::npos)
      << no_event.status().message();
  auto no_rank = replay::replayEvent(bs4, {7, 1}, cpuOnly());
  EXPECT_NE(no_rank.status().message().find("has no rank 7 (its ranks: 0, 1, 2)"),
            std::string::npos) << no_rank.status().message();
  auto bad_repeat = replay::replayEvent(bs4, {0, 1}, cpuOnly(0));
  EXPECT_EQ(bad_repeat.status().code(), ErrorCode::kInvalidArgument);
  // Rank 1's GEMM has other weights: not the same op at another batch size.
  auto mismatch = replay::replayPair(bs4, {0, 1}, bs4, {1, 7}, cpuOnly(1));
  ASSERT_FALSE(mismatch.isOk());
  EXPECT_NE(mismatch.status().message().find("weights"), std::string::npos)
      << mismatch.status().message();
  auto kinds = replay::replayPair(bs4, {0, 1}, bs4, {0, 8}, cpuOnly(1));
  EXPECT_FALSE(kinds.isOk());
}

TEST_F(ReplayToy, JsonHasTheTableFacts) {
  db::Run bs4 = open();
  auto r = replay::replayEvent(bs4, {0, 2}, cpuOnly(2));
  ASSERT_TRUE(r.isOk());
  const nlohmann::json j = replay::replayJson(*r);
  EXPECT_EQ(j["kind"], "collective");
  EXPECT_EQ(j["event"], 2);
  EXPECT_EQ(j["output"]["rows"], 4);
  EXPECT_EQ(j["reproducing"], nlohmann::json::array({"ring2/cpu"}));
  bool saw_ring2 = false;
  for (const auto& i : j["implementations"]) {
    if (i["name"] == "ring2/cpu") {
      saw_ring2 = true;
      EXPECT_EQ(i["status"], "ran");
      EXPECT_EQ(i["runs"], 2);
      EXPECT_EQ(i["distinct"], 1);
      EXPECT_EQ(i["matches_recorded"], 2);
      EXPECT_EQ(i["to_recorded"]["differing"], 0);
      EXPECT_TRUE(i["to_reference"].is_object());
    }
    if (i["name"] == "rank/gpu") {
      EXPECT_EQ(i["status"], "skipped");
      EXPECT_EQ(i["reason"], "--no-gpu");
      EXPECT_TRUE(i["matches_recorded"].is_null());
    }
  }
  EXPECT_TRUE(saw_ring2);
}

TEST_F(ReplayToy, ProgressCountsEveryRun) {
  db::Run bs4 = open();
  replay::ReplayOptions o = cpuOnly(3);
  int calls = 0, last_done = -1, last_total = -1;
  o.progress = [&](int done, int total, std::string_view) {
    ++calls;
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
  };
  auto r = replay::replayEvent(bs4, {0, 2}, o);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(last_total, 3 * 3 + 1);  // 3 ranks: rank, reversed, ring2 three times; fp64 once
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(calls, last_total + 1);
}

// A GEMM captured into a CUDA graph and replayed twice (graph_ops rows), between two calls:
// library-op numbering counts calls, like `detrace record --capture-range`, so the second call is
// op 1, not 3, and a replayed op is refused with the reason.
TEST(ReplayGraphOps, LibraryOpNumberingCountsCallsNotReplays) {
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  std::mt19937 gen(rng.seed());
  TempDir dir;
  synth::GemmSpec spec;
  synth::GemmData data;
  data.a = synth::randomBf16(gen, synth::extentElems(spec.m, spec.k, spec.lda));
  data.b = synth::randomBf16(gen, synth::extentElems(spec.k, spec.n, spec.ldb));
  data.d = synth::computeD(spec, data.a, data.b);
  auto w = db::TraceWriter::create(dir.file("proc-1.dtrace"));
  ASSERT_TRUE(w.isOk()) << w.status().message();
  (*w)->setRank({0, 1, 0, 0, 1, "h", "GPU", ""});
  const int64_t captured = synth::appendGemm(**w, spec, data, false);
  synth::appendKernel(**w, "cudaGraphLaunch");
  std::vector<int64_t> replayed;
  for (int64_t k = 0; k < 2; ++k) {
    replayed.push_back(synth::appendGemm(**w, spec, data, false));
    ASSERT_TRUE((*w)->appendGraphOp({replayed.back(), captured, k, 0x1234}));
  }
  const int64_t second = synth::appendGemm(**w, spec, data, false);
  ASSERT_TRUE((*w)->close().isOk());
  auto run = db::Run::open(dir.path().string());
  ASSERT_TRUE(run.isOk()) << run.status().message();

  auto index = replay::libraryOpIndex(*run, 0, second);
  ASSERT_TRUE(index.isOk()) << index.status().message();
  EXPECT_EQ(*index, 1);
  auto seq = replay::libraryOpSeq(*run, 0, 1);
  ASSERT_TRUE(seq.isOk()) << seq.status().message();
  EXPECT_EQ(*seq, second);
  EXPECT_FALSE(replay::libraryOpSeq(*run, 0, 2).isOk());  // two calls only
  auto refused = replay::libraryOpIndex(*run, 0, replayed[1]);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find(fmt::format("is replay 1 of a CUDA graph, of the op captured at event {}", captured)),
            std::string::npos) << refused.status().message();
  auto not_captured = replay::replayEvent(*run, {0, second}, cpuOnly());
  ASSERT_FALSE(not_captured.isOk());
  EXPECT_NE(not_captured.status().message().find("--capture-range 1 "), std::string::npos)
      << not_captured.status().message();
}

#else

TEST(ReplayUnavailable, SaysWhy) {
  EXPECT_FALSE(replay::replayAvailable());
}

#endif  // DETRACE_TEST_HAVE_KERNELS

}  // namespace
}  // namespace detrace
