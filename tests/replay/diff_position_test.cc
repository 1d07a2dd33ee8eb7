// The position of the first divergence in the diff report: the NVTX ranges open around it ("step 1
// › layer 2"), recorded as marker events, or a landmark counted from the GEMMs when a trace has no
// markers. Runs are written through TraceWriter as a small decoder: per step and layer a norm
// kernel and a fingerprinted GEMM, inside "step i" / "layer j" ranges.
#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "synth_mix.h"
#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "detrace/replay/diff.h"
#include "detrace/replay/diff_report.h"

namespace detrace::replay {
namespace {

using testing::TempDir;

using testing::mix;

struct Model {
  int steps = 2, layers = 3;
  bool markers = true;
  bool range_ids = false;        // nvtxRangeStart/End style: ends carry the range id
  int nondet_step = -1, nondet_layer = -1;  // this GEMM's output differs
  int raw_step = -1, raw_layer = -1;        // this layer's norm kernel (unfingerprinted) differs
  int variant_step = -1, variant_layer = -1;  // this layer's norm kernel is another variant
  bool extra_instant = false;  // an instant marker in every layer (only in one run)
};

class ModelWriter {
 public:
  explicit ModelWriter(const std::string& dir) {
    auto w = db::TraceWriter::create(dir + "/proc-1.dtrace");
    EXPECT_TRUE(w.isOk());
    w_ = std::move(*w);
    w_->setRank({0, 1, 0, 0, 1, "h", "GPU", ""});
  }

  void marker(const std::string& text, db::MarkerKind kind, int64_t id) {
    db::Event e;
    e.kind = db::EventKind::kMarker;
    e.name = w_->intern(text);
    db::Marker m;
    m.marker_kind = kind;
    m.value = id;
    ASSERT_TRUE(w_->appendMarker(e, m).has_value());
  }
  void kernel(const std::string& name, int64_t parent = -1) {
    db::Event e;
    e.kind = db::EventKind::kKernel;
    e.name = w_->intern(name);
    e.parent_seq = parent;
    ASSERT_TRUE(w_->append(e).has_value());
  }
  void gemm(uint64_t in, uint64_t out) {
    db::Event e;
    e.kind = db::EventKind::kGemm;
    e.name = w_->intern("cublasLtMatmul");
    db::Gemm g;
    g.api = e.name;
    g.m = 1024;
    g.n = 8;
    g.k = 1024;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = 66;
    auto seq = w_->appendGemm(e, g);
    ASSERT_TRUE(seq.has_value());
    for (int slot = 0; slot < 2; ++slot) {
      db::Operand o;
      o.seq = *seq;
      o.slot = slot;
      o.role = slot == 0 ? db::OperandRole::kInput : db::OperandRole::kOutput;
      o.has_digest = true;
      o.digest = slot == 0 ? in : out;
      EXPECT_TRUE(w_->appendOperand(o));
    }
    kernel("nvjet_sm90_tst_128x64_64x8_2x1_v_bz_TNT", *seq);
  }
  void close() { ASSERT_TRUE(w_->close().isOk()); }

 private:
  std::unique_ptr<db::TraceWriter> w_;
};

void writeModel(const std::string& dir, const Model& m) {
  ModelWriter w(dir);
  uint64_t h = 12345;
  int64_t next_id = 1;
  auto start = [&](const std::string& text) {
    int64_t id = next_id++;
    if (m.markers) w.marker(text, db::MarkerKind::kRangeStart, id);
    return id;
  };
  auto end = [&](int64_t id) {
    if (m.markers) w.marker("", db::MarkerKind::kRangeEnd, m.range_ids ? id : db::kUnset);
  };
  for (int s = 0; s < m.steps; ++s) {
    int64_t step = start(fmt::format("step {}", s));
    for (int l = 0; l < m.layers; ++l) {
      int64_t layer = start(fmt::format("layer {}", l));
      if (m.extra_instant) w.marker("checkpoint", db::MarkerKind::kInstant, db::kUnset);
      bool variant = s == m.variant_step && l == m.variant_layer;
      w.kernel(variant ? "void rmsnorm_kernel<bf16, 8>(float*)" : "void rmsnorm_kernel<bf16, 4>(float*)");
      if (s == m.raw_step && l == m.raw_layer) h ^= 8;  // the norm produced different bytes
      uint64_t out = mix(h, static_cast<uint64_t>(s * 100 + l));
      uint64_t in = h;
      if (s == m.nondet_step && l == m.nondet_layer) out ^= 1;
      w.gemm(in, out);
      h = out;
      end(layer);
    }
    end(step);
  }
  w.close();
}

RunDiff diffOf(const Model& a, const Model& b) {
  TempDir da, db_;
  writeModel(da.path().string(), a);
  writeModel(db_.path().string(), b);
  auto ra = db::Run::open(da.path().string());
  auto rb = db::Run::open(db_.path().string());
  EXPECT_TRUE(ra.isOk() && rb.isOk());
  auto d = diffRuns(*ra, *rb);
  EXPECT_TRUE(d.isOk()) << d.status().message();
  return *d;
}

TEST(DiffPosition, FirstDivergenceIsPlacedInItsStepAndLayer) {
  Model b;
  b.nondet_step = 1;
  b.nondet_layer = 2;
  RunDiff d = diffOf(Model{}, b);
  ASSERT_EQ(d.origin_rank, 0);
  const RankDiff& r = d.ranks[0];
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->status, PairStatus::kNondeterministic);
  EXPECT_EQ(r.position, (std::vector<std::string>{"step 1", "layer 2"}));
  EXPECT_TRUE(r.position_b.empty()) << "same position in both runs";
  EXPECT_EQ(r.landmark, "GEMM 6 of 6");
  std::string text = formatDiff(d, {});
  EXPECT_NE(text.find("  position         step 1 \xe2\x80\xba layer 2 (GEMM 6 of 6)\n"), std::string::npos)
      << text;
  nlohmann::json j = diffJson(d, {});
  EXPECT_EQ(j["ranks"][0]["first"]["position"], nlohmann::json({"step 1", "layer 2"}));
  EXPECT_EQ(j["ranks"][0]["first"]["landmark"], "GEMM 6 of 6");
  EXPECT_FALSE(j["ranks"][0]["first"].contains("position_b"));
}

TEST(DiffPosition, RangesEndedByIdAreMatchedByIdAndMarkersNeverDiffer) {
  Model a;
  a.range_ids = true;
  Model b = a;
  b.nondet_step = 0;
  b.nondet_layer = 1;
  RunDiff d = diffOf(a, b);
  ASSERT_TRUE(d.ranks[0].first);
  EXPECT_EQ(d.ranks[0].position, (std::vector<std::string>{"step 0", "layer 1"}));
  // Everything after the GEMM propagates; no marker pair is among the differing events.
  for (const PairDiff& p : d.ranks[0].differing) {
    EXPECT_NE(p.status, PairStatus::kSchedule) << "a marker pair was called a difference";
  }
}

TEST(DiffPosition, MarkersInOneRunOnlyAreNotADivergence) {
  Model b;
  b.extra_instant = true;
  RunDiff d = diffOf(Model{}, b);
  EXPECT_TRUE(d.identical()) << formatDiff(d, {});
  EXPECT_EQ(d.ranks[0].counts.at(PairStatus::kSchedule), 6) << "the 6 instant markers";
}

TEST(DiffPosition, DivergenceThroughAnUnfingerprintedKernelIsPlacedWhereItIsSeen) {
  Model b;
  b.raw_step = 1;
  b.raw_layer = 0;
  RunDiff d = diffOf(Model{}, b);
  const RankDiff& r = d.ranks[0];
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->status, PairStatus::kPropagated);
  // Seen at the first fingerprinted op after the norm kernel: the GEMM of step 1, layer 0.
  EXPECT_EQ(r.position, (std::vector<std::string>{"step 1", "layer 0"}));
  EXPECT_EQ(r.landmark, "GEMM 4 of 6");
}

TEST(DiffPosition, AKernelIsPlacedAfterTheLastGemm) {
  Model b;
  b.variant_step = 1;
  b.variant_layer = 0;
  RunDiff d = diffOf(Model{}, b);
  const RankDiff& r = d.ranks[0];
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.first->status, PairStatus::kKernelSelection);
  EXPECT_EQ(r.position, (std::vector<std::string>{"step 1", "layer 0"}));
  EXPECT_EQ(r.landmark, "kernel after GEMM 3 of 6");
}

TEST(DiffPosition, PositionInBIsShownWhenItDiffers) {
  Model a;
  a.nondet_step = 0;
  a.nondet_layer = 2;
  // B names its layers 10, 11, 12 (only digits differ: the same family, so they align).
  TempDir da, db_;
  writeModel(da.path().string(), a);
  {
    ModelWriter w(db_.path().string());
    uint64_t h = 12345;
    for (int s = 0; s < 2; ++s) {
      w.marker(fmt::format("step {}", s), db::MarkerKind::kRangeStart, db::kUnset);
      for (int l = 0; l < 3; ++l) {
        w.marker(fmt::format("layer {}", l + 10), db::MarkerKind::kRangeStart, db::kUnset);
        w.kernel("void rmsnorm_kernel<bf16, 4>(float*)");
        uint64_t out = mix(h, static_cast<uint64_t>(s * 100 + l));
        w.gemm(h, out);
        h = out;
        w.marker("", db::MarkerKind::kRangeEnd, db::kUnset);
      }
      w.marker("", db::MarkerKind::kRangeEnd, db::kUnset);
    }
    w.close();
  }
  auto d = diffRuns(*db::Run::open(da.path().string()), *db::Run::open(db_.path().string()));
  ASSERT_TRUE(d.isOk());
  const RankDiff& r = d->ranks[0];
  ASSERT_TRUE(r.first);
  EXPECT_EQ(r.position, (std::vector<std::string>{"step 0", "layer 2"}));
  EXPECT_EQ(r.position_b, (std::vector<std::string>{"step 0", "layer 12"}));
  std::string text = formatDiff(*d, {});
  EXPECT_NE(text.find("  position in B    step 0 \xe2\x80\xba layer 12\n"), std::string::npos) << text;
}

TEST(DiffPosition, WithoutMarkersTheLandmarkStands) {
  Model a;
  a.markers = false;
  Model b = a;
  b.nondet_step = 1;
  b.nondet_layer = 1;
  RunDiff d = diffOf(a, b);
  const RankDiff& r = d.ranks[0];
  ASSERT_TRUE(r.first);
  EXPECT_TRUE(r.position.empty());
  EXPECT_EQ(r.landmark, "GEMM 5 of 6");
  std::string text = formatDiff(d, {});
  EXPECT_NE(text.find("  position         GEMM 5 of 6 (the trace has no NVTX ranges)\n"), std::string::npos)
      << text;
  EXPECT_EQ(diffJson(d, {})["ranks"][0]["first"]["position"], nlohmann::json::array());
}

TEST(DiffPosition, PositionAtReplaysPushPopStartEndAndSteps) {
  RankOps r;
  r.names = {"", "step 7", "layer 1", "attn", "", "layer 2"};
  r.ops.resize(20);
  r.markers = {
      {0, db::MarkerKind::kStep, -1, 7, 1},         // a step marker (no range)
      {1, db::MarkerKind::kRangeStart, -1, 10, 2},  // layer 1 (id 10)
      {2, db::MarkerKind::kRangeStart, -1, 11, 3},  // attn (id 11)
      {4, db::MarkerKind::kRangeEnd, -1, 10, 4},    // ends layer 1 by id, out of order
      {6, db::MarkerKind::kRangeEnd, -1, -1, 4},    // a pop: ends attn
      {7, db::MarkerKind::kRangeStart, -1, -1, 5},  // layer 2, pushed
  };
  EXPECT_EQ(positionAt(r, 0), (std::vector<std::string>{}));
  EXPECT_EQ(positionAt(r, 1), (std::vector<std::string>{"step 7"}));
  EXPECT_EQ(positionAt(r, 3), (std::vector<std::string>{"step 7", "layer 1", "attn"}));
  EXPECT_EQ(positionAt(r, 5), (std::vector<std::string>{"step 7", "attn"}));
  EXPECT_EQ(positionAt(r, 6), (std::vector<std::string>{"step 7", "attn"}));
  EXPECT_EQ(positionAt(r, 7), (std::vector<std::string>{"step 7"}));
  EXPECT_EQ(positionAt(r, 19), (std::vector<std::string>{"step 7", "layer 2"}));
}

}  // namespace
}  // namespace detrace::replay
