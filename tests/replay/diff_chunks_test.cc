// detrace diff reads each run a chunk of events at a time (DiffOptions::chunk_events) and forgets
// what it has classified. These tests diff synthetic runs of realistic shape, long enough that the
// windows move many times, once in one piece and once per chunk size, and require the same result
// to the last field; some chunk sizes put the first divergence, or a moved event's two places, on
// either side of a chunk boundary. And they bound the window a diff holds on a long run.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "detrace/replay/diff.h"
#include "detrace/replay/diff_report.h"

#include "../db/test_util.h"
#include "synth_mix.h"

namespace detrace::replay {
namespace {

using testing::mix;
using testing::TempDir;

// What one run does. Per layer, on every rank: an NVTX range, an rmsnorm kernel, `before_gemm`
// elementwise kernels (300 more in `long_layer`: a stretch longer than most chunks), a GEMM with
// its kernel, two elementwise kernels, an all-reduce with its kernel; a step marker every 8
// layers; host-to-device copies from another thread after the main-thread steps in `copies`.
// Fingerprints (per-row digests: `tokens` rows, row 0 the request) flow through.
struct Plan {
  bool library_ops = true;  // false: the GEMMs and all-reduces are only their kernels
  int layers = 1200;
  int64_t tokens = 1;
  int long_layer = 400;
  int long_kernels = 300;  // the long layer's extra elementwise kernels
  std::vector<int> copies = {};
  int32_t plant_rank = 0;
  int nondet_gemm = -1;    // the layer whose GEMM output differs (all rows)
  int batch_variant = -1;  // the layer whose GEMM output differs in the request's row only
  int raw_kernel = -1;     // the layer whose rmsnorm (no fingerprints) changes the hidden state
  int extra_kernel = -1;   // the layer with one more kernel, after the long stretch
  int extra_gemm = -1;     // the layer with another GEMM (another shape) after its rmsnorm
  int algo = -1;           // the layer whose GEMM ran another cuBLASLt algorithm
};

// Where the planted events landed on the planted rank, to put chunk boundaries there.
struct Landmarks {
  int64_t plant = -1;           // the planted event (or the GEMM after it)
  std::vector<int64_t> copies;  // the copies' seqs
};

using Rows = std::vector<uint64_t>;

uint64_t fold(const Rows& rows) {
  uint64_t h = 0x5eed;
  for (uint64_t r : rows) h = mix(h, r);
  return h;
}

class RankWriter {
 public:
  RankWriter(const std::string& dir, int32_t rank, int32_t world) : rank_(rank), world_(world) {
    auto w = db::TraceWriter::create(fmt::format("{}/proc-{}.dtrace", dir, 100 + rank));
    EXPECT_TRUE(w.isOk());
    w_ = std::move(*w);
    w_->setRank({rank, world, rank, rank, 100 + rank, "h", "GPU", ""});
    main_ = w_->stream(0x10, rank);
    side_ = w_->stream(0x20, rank);
  }

  int64_t kernel(const std::string& name, int64_t parent = -1) {
    db::Event e = event(db::EventKind::kKernel, name);
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {128, 1, 1};
    e.launch.block = {256, 1, 1};
    return w_->append(e).value_or(-1);
  }

  int64_t marker(db::MarkerKind kind, const std::string& text, int64_t value) {
    db::Marker m;
    m.marker_kind = kind;
    m.value = value;
    return w_->appendMarker(event(db::EventKind::kMarker, text), m).value_or(-1);
  }

  int64_t copy(uint64_t bytes) {
    db::Event e = event(db::EventKind::kMemcpy, "memcpy HtoD");
    e.stream = side_;
    int64_t seq = w_->append(e).value_or(-1);
    operand(seq, 0, db::OperandRole::kInput, {bytes});
    operand(seq, 1, db::OperandRole::kOutput, {bytes});
    return seq;
  }

  int64_t gemm(int64_t m, int32_t algo, const Rows& in, uint64_t weight, const Rows& out) {
    db::Event e = event(db::EventKind::kGemm, "cublasLtMatmul");
    db::Gemm g;
    g.api = e.name;
    g.m = m;
    g.n = 1024;
    g.k = 4096;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = algo;
    g.tile = 27;
    int64_t seq = w_->appendGemm(e, g).value_or(-1);
    operand(seq, 0, db::OperandRole::kInput, in);
    operand(seq, 1, db::OperandRole::kInput, {weight}, /*rows=*/false);
    operand(seq, 2, db::OperandRole::kOutput, out);
    kernel("sm90_gemm_kernel<128, 256>", seq);
    return seq;
  }

  int64_t allReduce(int64_t comm_seq, const Rows& in, const Rows& out) {
    db::Event e = event(db::EventKind::kCollective, "ncclAllReduce");
    db::Collective c;
    c.op = db::CollOp::kAllReduce;
    c.dtype = db::DType::kBF16;
    c.count = static_cast<int64_t>(in.size()) * 1024;
    c.redop = db::RedOp::kSum;
    c.comm_id = 42;
    c.comm_rank = rank_;
    c.comm_nranks = world_;
    c.comm_seq = comm_seq;
    c.algo = w_->intern("Ring");
    c.proto = w_->intern("LL");
    c.channels = 2;
    int64_t seq = w_->appendCollective(e, c).value_or(-1);
    operand(seq, 0, db::OperandRole::kInput, in);
    operand(seq, 1, db::OperandRole::kOutput, out);
    kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", seq);
    return seq;
  }

  void close() { EXPECT_TRUE(w_->close().isOk()); }

 private:
  db::Event event(db::EventKind kind, const std::string& name) {
    db::Event e;
    e.kind = kind;
    e.name = w_->intern(name);
    e.stream = main_;
    return e;
  }

  void operand(int64_t seq, int32_t slot, db::OperandRole role, const Rows& rows,
               bool per_row = true) {
    db::Operand o;
    o.seq = seq;
    o.slot = slot;
    o.role = role;
    o.has_digest = true;
    o.digest = fold(rows);
    if (per_row) o.row_digests = rows;
    EXPECT_TRUE(w_->appendOperand(o));
  }

  std::unique_ptr<db::TraceWriter> w_;
  int32_t rank_, world_;
  int64_t main_ = -1, side_ = -1;
};

// One rank's state while writing a layer.
struct RankState {
  RankWriter w;
  Rows h;
  int step = 0;
  size_t next_copy = 0;
};

// Writes `world` ranks of `plan` to `dir`.
Landmarks writeRun(const std::string& dir, int32_t world, uint64_t seed, const Plan& plan) {
  std::vector<std::unique_ptr<RankState>> ranks;
  for (int32_t r = 0; r < world; ++r) {
    Rows h;
    for (int64_t t = 0; t < plan.tokens; ++t)
      h.push_back(mix(seed, 7 + static_cast<uint64_t>(t) * 1000));
    ranks.push_back(std::make_unique<RankState>(RankState{RankWriter(dir, r, world), h}));
  }
  Landmarks marks;
  for (int layer = 0; layer < plan.layers; ++layer) {
    std::vector<Rows> partial;
    for (int32_t r = 0; r < world; ++r) {
      RankState& s = *ranks[static_cast<size_t>(r)];
      const bool here = r == plan.plant_rank;
      // After each main-thread step, the copies that land there.
      auto stepped = [&] {
        while (s.next_copy < plan.copies.size() && plan.copies[s.next_copy] == s.step) {
          int64_t seq = s.w.copy(mix(seed, 500 + s.next_copy++));
          if (here) marks.copies.push_back(seq);
        }
        ++s.step;
      };
      if (layer % 8 == 0)
        s.w.marker(db::MarkerKind::kStep, fmt::format("step {}", layer / 8), layer / 8);
      s.w.marker(db::MarkerKind::kRangeStart, fmt::format("layer {}", layer), -1);
      s.w.kernel("rmsnorm_kernel<bf16, 4>");
      stepped();
      if (here && layer == plan.raw_kernel) s.h[0] ^= 8;
      if (here && layer == plan.extra_gemm) marks.plant = s.w.gemm(plan.tokens * 2, 6, s.h, 1, s.h);
      const int before = 1 + (layer == plan.long_layer ? plan.long_kernels : 0);
      for (int k = 0; k < before; ++k) {
        s.w.kernel(fmt::format("elementwise_kernel<{}>", k % 3));
        stepped();
      }
      if (here && layer == plan.extra_kernel) marks.plant = s.w.kernel("splitk_reduce_kernel");
      const uint64_t weight = mix(seed, static_cast<uint64_t>(layer * 1000 + r));
      Rows out;
      for (uint64_t x : s.h) out.push_back(mix(x, weight));
      if (here && layer == plan.nondet_gemm) {
        for (uint64_t& x : out) x ^= 1;
      }
      if (here && layer == plan.batch_variant) out[0] ^= 1;
      if (!plan.library_ops) {
        s.w.kernel("sm90_gemm_kernel<128, 256>");
        s.w.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
        s.w.marker(db::MarkerKind::kRangeEnd, "", -1);
        continue;
      }
      int64_t gemm = s.w.gemm(plan.tokens, here && layer == plan.algo ? 21 : 6, s.h, weight, out);
      if (here &&
          (layer == plan.nondet_gemm || layer == plan.batch_variant || layer == plan.raw_kernel)) {
        marks.plant = gemm;
      }
      stepped();
      s.w.kernel("silu_kernel<bf16>");
      s.w.kernel("add_kernel<bf16>");
      stepped();
      partial.push_back(out);
    }
    if (!plan.library_ops) continue;
    Rows sum(static_cast<size_t>(plan.tokens), 0);
    for (const Rows& p : partial) {
      for (size_t t = 0; t < sum.size(); ++t) sum[t] += p[t];
    }
    Rows reduced;
    for (uint64_t x : sum) reduced.push_back(mix(x, 99));
    for (int32_t r = 0; r < world; ++r) {
      RankState& s = *ranks[static_cast<size_t>(r)];
      s.w.allReduce(layer, partial[static_cast<size_t>(r)], reduced);
      s.w.marker(db::MarkerKind::kRangeEnd, "", -1);
      s.h = reduced;
    }
  }
  for (auto& s : ranks) s->w.close();
  return marks;
}

void expectSameRows(const RankDiff& x, const RankDiff& y) {
  ASSERT_EQ(x.differing.size(), y.differing.size()) << "rank " << x.rank;
  for (size_t i = 0; i < x.differing.size(); ++i) {
    const PairDiff& p = x.differing[i];
    const PairDiff& q = y.differing[i];
    ASSERT_EQ(std::tie(p.a, p.b, p.status, p.collectives_before, p.partner),
              std::tie(q.a, q.b, q.status, q.collectives_before, q.partner))
        << "rank " << x.rank << ", row " << i;
  }
}

// Everything a diff says: the report, its JSON and every differing row.
void expectSameDiff(const RunDiff& whole, const RunDiff& chunked) {
  const DiffLabels labels{"a", "b"};
  EXPECT_EQ(formatDiff(whole, labels), formatDiff(chunked, labels));
  EXPECT_EQ(diffJson(whole, labels).dump(1), diffJson(chunked, labels).dump(1));
  ASSERT_EQ(whole.ranks.size(), chunked.ranks.size());
  for (size_t r = 0; r < whole.ranks.size(); ++r) {
    expectSameRows(whole.ranks[r], chunked.ranks[r]);
    EXPECT_EQ(whole.ranks[r].differingEvents(), chunked.ranks[r].differingEvents());
  }
}

RunDiff diffDirs(const TempDir& a, const TempDir& b, int64_t chunk, bool keep = true) {
  auto ra = db::Run::open(a.path().string());
  auto rb = db::Run::open(b.path().string());
  EXPECT_TRUE(ra.isOk() && rb.isOk());
  DiffOptions options;
  options.chunk_events = chunk;
  options.keep_differing = keep;
  auto d = diffRuns(*ra, *rb, options);
  EXPECT_TRUE(d.isOk()) << d.status().message();
  return d.isOk() ? *d : RunDiff{};
}

struct Scenario {
  const char* name;
  Plan a, b;
  int32_t world = 2;
};

// Run A's copies land after these main-thread steps; run B's a few steps later (moved events),
// one of them early, during the first layers.
const std::vector<int> kCopiesA = {3, 1500, 2400, 3000};
const std::vector<int> kCopiesB = {6, 1504, 2410, 3003};

Plan withCopies(Plan p, const std::vector<int>& copies) {
  p.copies = copies;
  return p;
}

const Scenario kScenarios[] = {
    // A nondeterministic GEMM on rank 1 at layer 450: rank 0's all-reduce after it differs with
    // equal inputs, and becomes propagated through the collective.
    {"moved_copies_and_nondeterministic_gemm", withCopies({}, kCopiesA),
     withCopies({.plant_rank = 1, .nondet_gemm = 450}, kCopiesB)},
    // Divergence entering through the rmsnorm of the long layer: the suspects are the 300 kernels
    // before its GEMM, a stretch that the windows move across.
    {"raw_kernel_before_a_long_stretch", {}, {.raw_kernel = 400}},
    // One more kernel after the long stretch (a schedule difference whose landmark is the GEMM
    // before the stretch), and another algorithm for a later GEMM (the kernel-selection table).
    {"extra_kernel_and_algorithm_change", withCopies({}, kCopiesA),
     withCopies({.extra_kernel = 400, .algo = 520}, kCopiesB)},
    // Another GEMM in B just before a layer's long stretch: library ops no longer align one for
    // one, and the windows have to read past the stretch (where no library op is) to see the runs
    // back in step.
    {"extra_gemm_before_a_long_stretch", {}, {.extra_gemm = 400}},
    // No library ops at all: the whole run is one stretch between anchors, aligned a window at a
    // time by kernel name.
    {"kernels_only_with_an_extra_kernel",
     {.library_ops = false},
     {.library_ops = false, .extra_kernel = 400}},
    // bs=1 against bs=8: the request's rows of one GEMM change (batch-size mode).
    {"batch_variant", {.tokens = 1}, {.tokens = 8, .batch_variant = 500}},
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class DiffChunks : public ::testing::TestWithParam<Scenario> {};

TEST_P(DiffChunks, EveryChunkSizeGivesTheWholeRunDiff) {
  const Scenario& s = GetParam();
  TempDir a, b;
  uint64_t seed = testing::Rng().u64();
  writeRun(a.path().string(), s.world, seed, s.a);
  Landmarks marks = writeRun(b.path().string(), s.world, seed, s.b);
  ASSERT_GE(marks.plant, 0);
  RunDiff whole = diffDirs(a, b, int64_t{1} << 40);
  ASSERT_FALSE(whole.identical());
  EXPECT_LT(whole.ranks[0].events_a, 2 * kDiffChunkEvents)
      << "the default diffs these in one piece";
  // Chunk sizes that put the planted event first and last in a chunk, and a moved copy's two
  // places in different chunks; and a few plain ones.
  std::vector<int64_t> chunks = {7, 64, 1000, 4096, marks.plant, marks.plant + 1};
  for (int64_t seq : marks.copies) chunks.push_back(seq + 1);
  for (int64_t chunk : chunks) {
    SCOPED_TRACE(fmt::format("{}, chunk {}", s.name, chunk));
    RunDiff chunked = diffDirs(a, b, chunk);
    expectSameDiff(whole, chunked);
    if (chunk < 256) {
      EXPECT_LT(chunked.ranks[0].peak_window, chunked.ranks[0].events_a) << "the windows moved";
    }
  }
  // Without the rows, the report is the same.
  RunDiff counts_only = diffDirs(a, b, 64, /*keep=*/false);
  EXPECT_EQ(formatDiff(whole, {"a", "b"}), formatDiff(counts_only, {"a", "b"}));
  EXPECT_TRUE(counts_only.ranks[0].differing.empty());
}

INSTANTIATE_TEST_SUITE_P(Synthetic, DiffChunks, ::testing::ValuesIn(kScenarios),
                         [](const ::testing::TestParamInfo<Scenario>& p) {
                           return std::string(p.param.name);
                         });

// The scenarios say what they claim (a chunked diff that agrees with a whole one about nothing
// proves little).
TEST(DiffChunks, ScenariosPlantWhatTheyClaim) {
  TempDir a, b;
  uint64_t seed = testing::Rng().u64();
  writeRun(a.path().string(), 2, seed, kScenarios[0].a);
  writeRun(b.path().string(), 2, seed, kScenarios[0].b);
  RunDiff d = diffDirs(a, b, 64);
  ASSERT_EQ(d.origin_rank, 1);
  EXPECT_EQ(d.ranks[1].first->status, PairStatus::kNondeterministic);
  EXPECT_EQ(d.ranks[0].first->status, PairStatus::kPropagated) << "through the all-reduce";
  EXPECT_EQ(d.ranks[0].reordered(), 4);
  EXPECT_EQ(d.ranks[1].reordered(), 4);
  EXPECT_EQ(d.ranks[1].landmark, "GEMM 451 of 1200");

  TempDir c, e;
  writeRun(c.path().string(), 2, seed, kScenarios[1].a);
  writeRun(e.path().string(), 2, seed, kScenarios[1].b);
  d = diffDirs(c, e, 64);
  const RankDiff& r = d.ranks[0];
  ASSERT_TRUE(r.first && r.entered_after);
  EXPECT_NE(r.why.find("through 302 kernel(s) without fingerprints"), std::string::npos) << r.why;
  EXPECT_EQ(r.position, (std::vector<std::string>{"step 50", "layer 400"}));
}

// Another GEMM in B before 3000 kernels without a library op: with 7-event chunks the windows
// cannot read far enough to see the runs back in step (1024 events at most), so the diff aligns
// that stretch on its own, says so, and still finds the extra GEMM.
TEST(DiffChunks, RunsNotBackInStepWithinTheLargestWindowAreAlignedOnTheirOwnAndSaidSo) {
  TempDir a, b;
  uint64_t seed = testing::Rng().u64();
  Plan plan{.layers = 60, .long_layer = 20, .long_kernels = 3000};
  writeRun(a.path().string(), 1, seed, plan);
  plan.extra_gemm = 20;
  Landmarks marks = writeRun(b.path().string(), 1, seed, plan);
  RunDiff d = diffDirs(a, b, 7, /*keep=*/false);
  ASSERT_EQ(d.ranks.size(), 1u);
  const RankDiff& r = d.ranks[0];
  EXPECT_GT(r.forced_windows, 0);
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->b, marks.plant);
  EXPECT_EQ(r.first->status, PairStatus::kSchedule);
  std::string text = formatDiff(d, {"a", "b"});
  EXPECT_NE(text.find("did not fall back into step within the diff's window"), std::string::npos)
      << text;
  EXPECT_EQ(diffDirs(a, b, 1 << 20).ranks[0].forced_windows, 0) << "one window holds it all";
}

// A long run (60k events a side) diffed with small chunks: the window either run holds stays a
// few chunks past the reorder window, not the run.
TEST(DiffChunks, WindowStaysBoundedOnALongRun) {
  TempDir a, b;
  uint64_t seed = testing::Rng().u64();
  Plan plan{.layers = 6000, .long_layer = 100};
  writeRun(a.path().string(), 1, seed, plan);
  plan.nondet_gemm = 5000;
  writeRun(b.path().string(), 1, seed, plan);
  const int64_t chunk = 256;
  RunDiff d = diffDirs(a, b, chunk, /*keep=*/false);
  ASSERT_EQ(d.ranks.size(), 1u);
  const RankDiff& r = d.ranks[0];
  EXPECT_GT(r.events_a, 60000);
  EXPECT_EQ(r.first->status, PairStatus::kNondeterministic);
  EXPECT_LE(r.peak_window, kReorderWindow + 8 * chunk);
}

}  // namespace
}  // namespace detrace::replay
