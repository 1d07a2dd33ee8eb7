// detrace diff on runs whose only difference is where another thread's or stream's work landed in
// a rank's event sequence (moved events: reordered, not a divergence, unless their contents
// differ), and on collectives whose NCCL algorithm, protocol or channels change (the NCCL choice
// table, with what became of the request's rows). The runs are written through TraceWriter.
#include <map>
#include <set>
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

using testing::TempDir;

using testing::mix;

// An operand: its digest, and per-row digests for batch mode (empty: none).
struct Data {
  uint64_t digest = 0;
  std::vector<uint64_t> rows;
};

// What NCCL chose for a collective.
struct NcclChoice {
  std::string algo = "Ring", proto = "LL";
  int32_t channels = 2;
};

// Writes one rank's trace, event by event; every call returns the event's seq.
class RankWriter {
 public:
  RankWriter(const std::string& dir, int32_t rank, int32_t world) {
    auto w = db::TraceWriter::create(fmt::format("{}/proc-{}.dtrace", dir, 100 + rank));
    EXPECT_TRUE(w.isOk());
    w_ = std::move(*w);
    w_->setRank({rank, world, rank, rank, 100 + rank, "h", "GPU", ""});
    rank_ = rank;
    world_ = world;
    main_stream_ = w_->stream(0x10, rank);
    copy_stream_ = w_->stream(0x20, rank);
  }

  int64_t kernel(const std::string& name, int64_t parent = -1) {
    db::Event e;
    e.kind = db::EventKind::kKernel;
    e.name = w_->intern(name);
    e.stream = main_stream_;
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {128, 1, 1};
    e.launch.block = {256, 1, 1};
    return w_->append(e).value_or(-1);
  }

  // A host-to-device copy on a second stream (as NCCL's proxy thread issues during setup).
  int64_t memcpy(const Data& in, const Data& out) {
    db::Event e;
    e.kind = db::EventKind::kMemcpy;
    e.name = w_->intern("memcpy HtoD");
    e.stream = copy_stream_;
    int64_t seq = w_->append(e).value_or(-1);
    operands(seq, in, out);
    return seq;
  }

  // A GEMM of `m` tokens and its kernel.
  int64_t gemm(int64_t m, int32_t algo, const Data& in, const Data& out) {
    db::Event e;
    e.kind = db::EventKind::kGemm;
    e.name = w_->intern("cublasLtMatmul");
    e.stream = main_stream_;
    db::Gemm g;
    g.api = e.name;
    g.m = m;
    g.n = 1024;
    g.k = 4096;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = algo;
    g.tile = 27;
    int64_t seq = w_->appendGemm(e, g).value_or(-1);
    operands(seq, in, out);
    kernel("sm90_gemm_kernel<128, 256>", seq);
    return seq;
  }

  // An all-reduce of `count` bf16 elements and its kernel.
  int64_t allReduce(int64_t count, const NcclChoice& choice, const Data& in, const Data& out) {
    db::Event e;
    e.kind = db::EventKind::kCollective;
    e.name = w_->intern("ncclAllReduce");
    e.stream = main_stream_;
    db::Collective c;
    c.op = db::CollOp::kAllReduce;
    c.dtype = db::DType::kBF16;
    c.count = count;
    c.redop = db::RedOp::kSum;
    c.comm_id = 42;
    c.comm_rank = rank_;
    c.comm_nranks = world_;
    c.comm_seq = comm_seq_++;
    c.algo = w_->intern(choice.algo);
    c.proto = w_->intern(choice.proto);
    c.channels = choice.channels;
    int64_t seq = w_->appendCollective(e, c).value_or(-1);
    operands(seq, in, out);
    kernel(fmt::format("ncclDevKernel_AllReduce_Sum_bf16_{}_{}", choice.algo, choice.proto), seq);
    return seq;
  }

  void close() { EXPECT_TRUE(w_->close().isOk()); }

 private:
  void operands(int64_t seq, const Data& in, const Data& out) {
    int32_t slot = 0;
    for (const auto& [data, role] :
         {std::pair{&in, db::OperandRole::kInput}, std::pair{&out, db::OperandRole::kOutput}}) {
      db::Operand o;
      o.seq = seq;
      o.slot = slot++;
      o.role = role;
      o.has_digest = true;
      o.digest = data->digest;
      o.row_digests = data->rows;
      EXPECT_TRUE(w_->appendOperand(o));
    }
  }

  std::unique_ptr<db::TraceWriter> w_;
  int32_t rank_ = 0, world_ = 1;
  int64_t main_stream_ = -1, copy_stream_ = -1;
  int64_t comm_seq_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reordered events

// One rank of a small tensor-parallel layer stack: rmsnorm, GEMM (+ kernel), silu, all-reduce
// (+ kernel), with fingerprints flowing through. `copies` host-to-device copies are issued from
// "another thread": copy i lands right after main-thread step copy_after[i] (steps count the
// kernels, GEMMs and all-reduces written, from 0). `copy_out_xor` perturbs copy i's output.
struct ReorderSpec {
  std::vector<int> copy_after = {};
  std::map<int, uint64_t> copy_out_xor = {};
  int layers = 4;
  int extra_kernels = 0;  // that many more silu kernels per layer (a longer program)
};

void writeLayers(const std::string& dir, uint64_t seed, const ReorderSpec& spec) {
  RankWriter w(dir, 0, 1);
  int step = 0;
  size_t next_copy = 0;
  // After each main-thread step, the copies that land there.
  auto after_step = [&] {
    while (next_copy < spec.copy_after.size() && spec.copy_after[next_copy] == step) {
      int i = static_cast<int>(next_copy++);
      uint64_t bytes = mix(seed, 1000 + static_cast<uint64_t>(i));
      auto x = spec.copy_out_xor.find(i);
      w.memcpy({bytes, {}}, {bytes ^ (x != spec.copy_out_xor.end() ? x->second : 0), {}});
    }
    ++step;
  };
  uint64_t h = mix(seed, 7);
  for (int layer = 0; layer < spec.layers; ++layer) {
    w.kernel("rmsnorm_kernel<bf16, 4>");
    after_step();
    uint64_t out = mix(h, static_cast<uint64_t>(layer));
    w.gemm(8, 66, {h, {}}, {out, {}});
    after_step();
    for (int k = 0; k <= spec.extra_kernels; ++k) {
      w.kernel("silu_kernel<bf16>");
      after_step();
    }
    uint64_t reduced = mix(out, 99);
    w.allReduce(8 * 1024, {}, {out, {}}, {reduced, {}});
    after_step();
    h = reduced;
  }
  w.close();
}

RunDiff diffDirs(const TempDir& a, const TempDir& b, const DiffOptions& options = {}) {
  auto ra = db::Run::open(a.path().string());
  auto rb = db::Run::open(b.path().string());
  EXPECT_TRUE(ra.isOk() && rb.isOk());
  auto d = diffRuns(*ra, *rb, options);
  EXPECT_TRUE(d.isOk()) << d.status().message();
  return d.isOk() ? *d : RunDiff{};
}

// The seqs of run `dir`'s memcpy events, in order.
std::vector<int64_t> copySeqs(const TempDir& dir) {
  auto run = db::Run::open(dir.path().string());
  EXPECT_TRUE(run.isOk());
  auto reader = run->openRank(0);
  EXPECT_TRUE(reader.isOk());
  auto ops = loadRankOps(**reader, 0);
  EXPECT_TRUE(ops.isOk());
  std::vector<int64_t> seqs;
  for (int64_t s = 0; s < ops->size(); ++s) {
    if (ops->ops[static_cast<size_t>(s)].kind() == db::EventKind::kMemcpy) seqs.push_back(s);
  }
  return seqs;
}

TEST(DiffReorder, CopiesFromAnotherThreadAtOtherPlacesAreReorderedNotDivergent) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  // The same three copies; in B they land later, past the first GEMM and the first all-reduce
  // (between other library ops, so which event moved is not ambiguous).
  writeLayers(a.path().string(), seed, {.copy_after = {0, 0, 1}});
  writeLayers(b.path().string(), seed, {.copy_after = {3, 3, 5}});
  RunDiff d = diffDirs(a, b);
  ASSERT_EQ(d.ranks.size(), 1u);
  const RankDiff& r = d.ranks[0];
  EXPECT_EQ(r.events_a, r.events_b);
  EXPECT_TRUE(d.identical()) << formatDiff(d, {"tp2-a", "tp2-b"});
  EXPECT_FALSE(r.first.has_value());
  EXPECT_EQ(r.reordered(), 3);
  EXPECT_EQ(r.count(PairStatus::kSchedule), 0);
  EXPECT_EQ(r.count(PairStatus::kIdentical) + r.reordered(), r.events_a)
      << "a moved event counts once";
  EXPECT_EQ(r.differingEvents(), 0);
  // Each moved copy is two rows (its place in A, its place in B) naming each other, in the order
  // of both runs, so the aligned rows stay monotone.
  std::vector<int64_t> in_a = copySeqs(a), in_b = copySeqs(b);
  ASSERT_EQ(r.differing.size(), 6u);
  std::set<std::pair<int64_t, int64_t>> moved;
  for (const PairDiff& p : r.differing) {
    EXPECT_EQ(p.status, PairStatus::kReordered);
    EXPECT_TRUE(p.moved());
    if (p.a >= 0) moved.insert({p.a, p.partner});
  }
  std::set<std::pair<int64_t, int64_t>> expected;
  for (size_t i = 0; i < in_a.size(); ++i) expected.insert({in_a[i], in_b[i]});
  EXPECT_EQ(moved, expected) << "copies are paired in order";

  std::string text = formatDiff(d, {"tp2-a", "tp2-b"});
  EXPECT_NE(text.find("IDENTICAL: tp2-a and tp2-b match"), std::string::npos) << text;
  EXPECT_NE(text.find("3 event(s) ran in another order relative to the rest on rank 0 (another "
                      "thread's or stream's work, e.g. NCCL's setup copies); their contents match"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("rank 0   identical ({} events; 3 reordered)", r.events_a)),
            std::string::npos)
      << text;
  nlohmann::json j = diffJson(d, {"tp2-a", "tp2-b"});
  EXPECT_EQ(j["identical"], true);
  EXPECT_EQ(j["ranks"][0]["reordered"], 3);
  EXPECT_EQ(j["ranks"][0]["counts"]["reordered"], 3);
  EXPECT_EQ(j["ranks"][0]["differing"], 0);
  EXPECT_FALSE(j["ranks"][0]["counts"].contains("schedule or shape difference")) << j.dump(1);
}

TEST(DiffReorder, AMovedCopyWithOtherBytesIsTheDivergenceAndIsNamed) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeLayers(a.path().string(), seed, {.copy_after = {0, 0, 1}});
  writeLayers(b.path().string(), seed, {.copy_after = {3, 3, 5}, .copy_out_xor = {{1, 0x40}}});
  RunDiff d = diffDirs(a, b);
  ASSERT_FALSE(d.identical());
  ASSERT_EQ(d.origin_rank, 0);
  const RankDiff& r = d.ranks[0];
  ASSERT_TRUE(r.first.has_value());
  std::vector<int64_t> in_a = copySeqs(a), in_b = copySeqs(b);
  ASSERT_EQ(in_a.size(), 3u);
  ASSERT_EQ(in_b.size(), 3u);
  // The second copy: equal input fingerprints, different output fingerprints, at its place in
  // each run.
  EXPECT_EQ(r.first->status, PairStatus::kNondeterministic);
  EXPECT_EQ(r.first->a, in_a[1]);
  EXPECT_EQ(r.first->b, in_b[1]);
  EXPECT_TRUE(r.first->moved());
  EXPECT_EQ(r.first_a, "memcpy memcpy HtoD");
  EXPECT_EQ(r.first_b, "memcpy memcpy HtoD");
  EXPECT_NE(
      r.why.find("nondeterministic: identical input fingerprints, different output fingerprints"),
      std::string::npos)
      << r.why;
  EXPECT_NE(r.why.find(fmt::format("another order relative to the rest: event {} in A, {} in B",
                                   in_a[1], in_b[1])),
            std::string::npos)
      << r.why;
  EXPECT_EQ(r.reordered(), 2) << "the other two copies still match";
  EXPECT_EQ(r.count(PairStatus::kNondeterministic), 1);
  EXPECT_EQ(r.differingEvents(), 1);
  std::string text = formatDiff(d, {"A", "B"});
  EXPECT_NE(text.find(fmt::format("first divergence   rank 0, event {} in A / {} in B", in_a[1],
                                  in_b[1])),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  after it         0 more differing event(s) on this rank"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2 event(s) ran in another order relative to the rest on rank 0"),
            std::string::npos)
      << text;
  nlohmann::json j = diffJson(d, {"A", "B"});
  EXPECT_EQ(j["ranks"][0]["first"]["seq_a"], in_a[1]);
  EXPECT_EQ(j["ranks"][0]["first"]["seq_b"], in_b[1]);
  EXPECT_EQ(j["ranks"][0]["first"]["status"], "nondeterministic");
  EXPECT_EQ(j["ranks"][0]["first"]["moved"], true);
}

TEST(DiffReorder, ACopyMovedBeyondTheWindowIsAScheduleDifference) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  // About 4 steps per layer plus extra kernels: the copy moves by more than kReorderWindow.
  ReorderSpec spec{
      .copy_after = {0}, .layers = 3, .extra_kernels = static_cast<int>(kReorderWindow) / 2};
  writeLayers(a.path().string(), seed, spec);
  spec.copy_after = {static_cast<int>(kReorderWindow) + 100};
  writeLayers(b.path().string(), seed, spec);
  RunDiff d = diffDirs(a, b);
  ASSERT_FALSE(d.identical());
  const RankDiff& r = d.ranks[0];
  EXPECT_EQ(r.reordered(), 0);
  EXPECT_EQ(r.count(PairStatus::kSchedule), 2);
  ASSERT_TRUE(r.first.has_value());
  EXPECT_EQ(r.first->status, PairStatus::kSchedule);
  EXPECT_FALSE(r.first->moved());
}

TEST(DiffReorder, KernelsOfDifferentLibraryOpsAreNotTakenForMovedOnes) {
  // Each GEMM launches a kernel of another family in each run (swapped): the same kernel names
  // exist in both runs, but under different GEMMs. That is a different schedule, not a move.
  TempDir a, b;
  for (int run = 0; run < 2; ++run) {
    RankWriter w((run == 0 ? a : b).path().string(), 0, 1);
    for (int i = 0; i < 2; ++i) {
      bool swap = (run == 1) != (i == 1);
      uint64_t x = mix(1, static_cast<uint64_t>(i));
      int64_t seq = w.gemm(8, 66, {x, {}}, {mix(x, 2), {}});
      w.kernel(swap ? "gemv_kernel<bf16>" : "splitk_reduce_kernel<bf16>", seq);
    }
    w.close();
  }
  RunDiff d = diffDirs(a, b);
  EXPECT_FALSE(d.identical()) << formatDiff(d, {});
  EXPECT_EQ(d.ranks[0].reordered(), 0);
  EXPECT_EQ(d.ranks[0].count(PairStatus::kSchedule), 4);
}

// ---------------------------------------------------------------------------------------------
// NCCL choice changes

// One rank of a batch: per layer a GEMM and an all-reduce of 1024 elements per token, and in the
// last layer one of 8192 per token; the request is row `slot` of `batch` rows. NCCL picks by
// message size. `changed_layer` makes the all-reduce of that layer write other bytes into the
// request's row (a batch-variant collective).
void writeTpBatch(const std::string& dir, int32_t rank, int32_t world, int layers, int batch,
                  int slot, uint64_t seed, int changed_layer = -1) {
  RankWriter w(dir, rank, world);
  std::vector<uint64_t> rows(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i)
    rows[static_cast<size_t>(i)] = mix(seed + 1000, static_cast<uint64_t>(i));
  rows[static_cast<size_t>(slot)] = mix(seed, 1);  // the request
  auto next = [&](const std::vector<uint64_t>& in, uint64_t salt) {
    std::vector<uint64_t> out;
    for (uint64_t r : in) out.push_back(mix(r, salt));
    return out;
  };
  auto data = [&](const std::vector<uint64_t>& r) { return Data{mix(r[0], r.size()), r}; };
  auto choiceFor = [&](int64_t bytes) {
    int32_t channels = bytes <= 2048 ? 1 : bytes <= 16384 ? 2 : bytes <= 131072 ? 16 : 24;
    return NcclChoice{"Ring", "LL", channels};
  };
  for (int layer = 0; layer < layers; ++layer) {
    std::vector<uint64_t> out =
        next(rows, static_cast<uint64_t>(layer) * 10 + static_cast<uint64_t>(rank));
    w.gemm(batch, batch > 1 ? 21 : 6, data(rows), data(out));
    std::vector<uint64_t> reduced = next(out, 99);
    if (layer == changed_layer && batch > 1) reduced[static_cast<size_t>(slot)] ^= 4;
    int64_t count = int64_t{1024} * batch;
    w.allReduce(count, choiceFor(count * 2), data(out), data(reduced));
    rows = reduced;
  }
  std::vector<uint64_t> reduced = next(rows, 77);
  int64_t count = int64_t{8192} * batch;
  w.allReduce(count, choiceFor(count * 2), data(rows), data(reduced));
  w.close();
}

void writeTpBatchRun(const TempDir& dir, int layers, int batch, int slot, uint64_t seed,
                     int changed_layer = -1) {
  for (int32_t r = 0; r < 2; ++r)
    writeTpBatch(dir.path().string(), r, 2, layers, batch, slot, seed, changed_layer);
}

TEST(DiffNcclChoice, BatchPairListsChangedChoicesWithTheRequestsRowsUnchanged) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeTpBatchRun(a, 3, 1, 0, seed);
  writeTpBatchRun(b, 3, 64, 17, seed);
  RunDiff d = diffDirs(a, b);
  ASSERT_TRUE(d.batch_mode);
  EXPECT_TRUE(d.identical()) << formatDiff(d, {"bs1", "bs64"});
  ASSERT_EQ(d.collective_choice_changes.size(), 2u) << formatDiff(d, {"bs1", "bs64"});
  const CollectiveChoiceChange& small = d.collective_choice_changes[0];
  EXPECT_EQ(small.op, db::CollOp::kAllReduce);
  EXPECT_EQ(small.dtype, db::DType::kBF16);
  EXPECT_EQ(small.count_a, 1024);
  EXPECT_EQ(small.count_b, 65536);
  EXPECT_EQ(small.channels_a, 1);
  EXPECT_EQ(small.channels_b, 16);
  EXPECT_EQ(small.algo_a, "Ring");
  EXPECT_EQ(small.proto_b, "LL");
  EXPECT_EQ(small.calls, 6) << "3 layers x 2 ranks";
  EXPECT_EQ(small.unchanged, 6);
  EXPECT_STREQ(small.rows(), "unchanged");
  EXPECT_EQ(small.ranks, (std::vector<int32_t>{0, 1}));
  const CollectiveChoiceChange& big = d.collective_choice_changes[1];
  EXPECT_EQ(big.count_a, 8192);
  EXPECT_EQ(big.count_b, 524288);
  EXPECT_EQ(big.channels_a, 2);
  EXPECT_EQ(big.channels_b, 24);
  EXPECT_EQ(big.calls, 2);
  EXPECT_STREQ(big.rows(), "unchanged");

  std::string text = formatDiff(d, {"bs1", "bs64"});
  EXPECT_NE(
      text.find(
          "NCCL choice changes (A -> B), and whether the request's rows of their outputs changed\n"
          "       6x  AllReduce bf16 1024 (2 KiB) -> 65536 (128 KiB), ranks 0, 1\n"
          "          Ring/LL/1 ch -> Ring/LL/16 ch: rows unchanged\n"
          "       2x  AllReduce bf16 8192 (16 KiB) -> 524288 (1 MiB), ranks 0, 1\n"
          "          Ring/LL/2 ch -> Ring/LL/24 ch: rows unchanged\n"),
      std::string::npos)
      << text;
  nlohmann::json j = diffJson(d, {"bs1", "bs64"});
  ASSERT_EQ(j["collective_choice_changes"].size(), 2u);
  const nlohmann::json& row = j["collective_choice_changes"][0];
  EXPECT_EQ(row["op"], "AllReduce");
  EXPECT_EQ(row["dtype"], "bf16");
  EXPECT_EQ(row["count_a"], 1024);
  EXPECT_EQ(row["count_b"], 65536);
  EXPECT_EQ(row["algo_a"], "Ring");
  EXPECT_EQ(row["proto_a"], "LL");
  EXPECT_EQ(row["channels_a"], 1);
  EXPECT_EQ(row["channels_b"], 16);
  EXPECT_EQ(row["calls"], 6);
  EXPECT_EQ(row["rows"], "unchanged");
}

TEST(DiffNcclChoice, BatchPairSaysWhenTheRequestsRowsChanged) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeTpBatchRun(a, 3, 1, 0, seed);
  writeTpBatchRun(b, 3, 64, 17, seed, /*changed_layer=*/1);
  RunDiff d = diffDirs(a, b);
  ASSERT_TRUE(d.batch_mode);
  ASSERT_FALSE(d.identical());
  ASSERT_TRUE(d.ranks[0].first.has_value());
  EXPECT_EQ(d.ranks[0].first->status, PairStatus::kBatchVariant);
  ASSERT_EQ(d.collective_choice_changes.size(), 2u);
  const CollectiveChoiceChange& small = d.collective_choice_changes[0];
  // Per rank: layer 0 unchanged, layer 1 changed (the planted one), layer 2 read changed rows.
  EXPECT_EQ(small.calls, 6);
  EXPECT_EQ(small.unchanged, 2);
  EXPECT_EQ(small.changed, 2);
  EXPECT_EQ(small.inputs_differed, 2);
  EXPECT_STREQ(small.rows(), "changed");
  const CollectiveChoiceChange& big = d.collective_choice_changes[1];
  EXPECT_EQ(big.inputs_differed, 2);
  EXPECT_STREQ(big.rows(), "unknown");
  std::string text = formatDiff(d, {"bs1", "bs64"});
  EXPECT_NE(
      text.find("Ring/LL/1 ch -> Ring/LL/16 ch: rows changed in 2 of 6 call(s) (unchanged in 2 "
                "call(s); inputs already differed in 2 call(s))"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "Ring/LL/2 ch -> Ring/LL/24 ch: rows unknown (inputs already differed in 2 call(s))"),
      std::string::npos)
      << text;
  nlohmann::json j = diffJson(d, {"bs1", "bs64"});
  EXPECT_EQ(j["collective_choice_changes"][0]["rows"], "changed");
  EXPECT_EQ(j["collective_choice_changes"][0]["calls_changed"], 2);
  EXPECT_EQ(j["collective_choice_changes"][1]["rows"], "unknown");
}

TEST(DiffNcclChoice, RunToRunAChangedChoiceForTheSameSizeIsKernelSelectionAndListed) {
  // The same program twice; in B, NCCL runs one all-reduce with another protocol. The aligned pair
  // is a kernel-selection change (RankOps::choice() covers NCCL's algo/proto/channels), and the
  // NCCL table says its output stayed the same.
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  for (int run = 0; run < 2; ++run) {
    RankWriter w((run == 0 ? a : b).path().string(), 0, 1);
    uint64_t h = mix(seed, 3);
    for (int layer = 0; layer < 3; ++layer) {
      uint64_t out = mix(h, static_cast<uint64_t>(layer));
      w.gemm(8, 66, {h, {}}, {out, {}});
      NcclChoice choice;
      if (run == 1 && layer == 2) choice = {"Ring", "LL128", 2};
      h = mix(out, 5);
      w.allReduce(4096, choice, {out, {}}, {h, {}});
    }
    w.close();
  }
  RunDiff d = diffDirs(a, b);
  ASSERT_FALSE(d.batch_mode);
  ASSERT_TRUE(d.ranks[0].first.has_value());
  EXPECT_EQ(d.ranks[0].first->status, PairStatus::kKernelSelection);
  EXPECT_NE(d.ranks[0].why.find("Ring/LL/2 ch in A, Ring/LL128/2 ch in B"), std::string::npos)
      << d.ranks[0].why;
  ASSERT_EQ(d.collective_choice_changes.size(), 1u);
  const CollectiveChoiceChange& c = d.collective_choice_changes[0];
  EXPECT_EQ(c.count_a, 4096);
  EXPECT_EQ(c.count_b, 4096);
  EXPECT_EQ(c.proto_a, "LL");
  EXPECT_EQ(c.proto_b, "LL128");
  EXPECT_EQ(c.calls, 1);
  EXPECT_STREQ(c.rows(), "unchanged");
  std::string text = formatDiff(d, {});
  EXPECT_NE(text.find("NCCL choice changes (A -> B), and whether their outputs changed\n"
                      "       1x  AllReduce bf16 4096 (8 KiB), rank 0\n"
                      "          Ring/LL/2 ch -> Ring/LL128/2 ch: outputs unchanged\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace detrace::replay
