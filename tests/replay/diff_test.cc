// detrace diff on runs written through TraceWriter by a small simulated tensor-parallel model: data
// flows through GEMMs and all-reduces as fingerprints, so planted defects propagate the way real
// divergence does. Each test plants one defect and checks the verdict.
#include "detrace/replay/diff.h"

#include <algorithm>
#include <functional>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "synth_mix.h"
#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "detrace/replay/diff_report.h"

namespace detrace::replay {
namespace {

using testing::TempDir;

using testing::mix;

struct Plant {
  int32_t rank = -1, layer = -1;
  enum What { kNone, kGemmAlgo, kGemmNondet, kAllReduceNondet, kExtraKernel, kKernelVariant,
              kRawKernel, kPreMulSumQuarter, kPreMulSumHalf, kGemmBiasEpilogue,
              kGemmEpilogueUnrecorded } what = kNone;
};

// Writes a run of `world` ranks x `layers` layers: rmsnorm kernel, GEMM (+ its kernel), all-reduce
// (+ its kernel). The hidden state's fingerprint flows through; `plant` perturbs one spot.
// `row_digests`: the --row-digests the traces say they were recorded with (nullptr: none said,
// as in traces from before the option); `graph_weights_every` likewise for --graph-weights-every;
// `unfollowed`: rank 0's count of NCCL communicators its recorder could not follow.
void writeModel(const std::string& dir, int32_t world, int layers, uint64_t seed, Plant plant,
                const char* row_digests = nullptr, const char* graph_weights_every = nullptr,
                int64_t unfollowed = 0) {
  std::vector<std::unique_ptr<db::TraceWriter>> w;
  std::vector<uint64_t> h(static_cast<size_t>(world));
  for (int32_t r = 0; r < world; ++r) {
    auto wr = db::TraceWriter::create(fmt::format("{}/proc-{}.dtrace", dir, 100 + r));
    ASSERT_TRUE(wr.isOk());
    (*wr)->setRank({r, world, r, r, 100 + r, "h", "GPU", ""});
    if (row_digests != nullptr) (*wr)->setMeta("row_digests", row_digests);
    if (graph_weights_every != nullptr) (*wr)->setMeta("graph_weights_every", graph_weights_every);
    if (r == 0 && unfollowed > 0) (*wr)->addStat("nccl_comms_unfollowed", unfollowed);
    w.push_back(std::move(*wr));
    h[static_cast<size_t>(r)] = mix(seed, 7);  // the same prompt on every rank
  }
  auto at = [&](int32_t r, int layer, Plant::What what) {
    return plant.what == what && plant.rank == r && plant.layer == layer;
  };
  auto kernel = [&](int32_t r, const std::string& name, int64_t parent) {
    db::Event e;
    e.kind = db::EventKind::kKernel;
    e.name = w[static_cast<size_t>(r)]->intern(name);
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {128, 1, 1};
    e.launch.block = {256, 1, 1};
    (void)w[static_cast<size_t>(r)]->append(e);
  };
  auto operand = [&](int32_t r, int64_t seq, int32_t slot, db::OperandRole role, uint64_t digest) {
    db::Operand o;
    o.seq = seq;
    o.slot = slot;
    o.role = role;
    o.has_digest = true;
    o.digest = digest;
    EXPECT_TRUE(w[static_cast<size_t>(r)]->appendOperand(o));
  };
  for (int layer = 0; layer < layers; ++layer) {
    std::vector<uint64_t> partial(static_cast<size_t>(world));
    for (int32_t r = 0; r < world; ++r) {
      auto& wr = *w[static_cast<size_t>(r)];
      uint64_t& hr = h[static_cast<size_t>(r)];
      kernel(r, at(r, layer, Plant::kKernelVariant) ? "rmsnorm_kernel<bf16, 8>" : "rmsnorm_kernel<bf16, 4>", -1);
      if (at(r, layer, Plant::kExtraKernel)) kernel(r, "splitk_reduce_kernel", -1);
      if (at(r, layer, Plant::kRawKernel)) hr ^= 8;  // the rmsnorm kernel (no fingerprints) differs
      db::Event ge;
      ge.kind = db::EventKind::kGemm;
      ge.name = wr.intern("cublasLtMatmul");
      db::Gemm g;
      g.api = ge.name;
      g.m = 8; g.n = 1024; g.k = 4096;
      g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
      g.algo_id = 66; g.tile = 27; g.split_k = at(r, layer, Plant::kGemmAlgo) ? 4 : 1;
      g.epilogue = at(r, layer, Plant::kGemmBiasEpilogue)          ? 4    // CUBLASLT_EPILOGUE_BIAS
                   : at(r, layer, Plant::kGemmEpilogueUnrecorded) ? -1   // a trace from before it
                                                                  : 1;  // DEFAULT: none
      auto gseq = wr.appendGemm(ge, g);
      ASSERT_TRUE(gseq.has_value());
      uint64_t weight = mix(seed, static_cast<uint64_t>(layer * 1000 + r));
      operand(r, *gseq, 0, db::OperandRole::kInput, hr);
      operand(r, *gseq, 1, db::OperandRole::kInput, weight);
      uint64_t out = mix(hr, weight);
      if (at(r, layer, Plant::kGemmNondet) || at(r, layer, Plant::kGemmAlgo)) out ^= 1;
      operand(r, *gseq, 2, db::OperandRole::kOutput, out);
      kernel(r, "sm90_gemm_kernel<128, 256>", *gseq);
      partial[static_cast<size_t>(r)] = out;
    }
    uint64_t sum = 0;
    for (uint64_t p : partial) sum += p;
    for (int32_t r = 0; r < world; ++r) {
      auto& wr = *w[static_cast<size_t>(r)];
      db::Event ce;
      ce.kind = db::EventKind::kCollective;
      ce.name = wr.intern("ncclAllReduce");
      db::Collective c;
      c.op = db::CollOp::kAllReduce;
      c.dtype = db::DType::kBF16;
      c.count = 8 * 4096;
      c.redop = db::RedOp::kSum;
      if (at(r, layer, Plant::kPreMulSumQuarter) || at(r, layer, Plant::kPreMulSumHalf)) {
        c.redop = db::RedOp::kPreMulSum;  // a sum of inputs times 0.25 or 0.5 (bf16 bits)
        c.has_redop_scalar = true;
        c.redop_scalar = at(r, layer, Plant::kPreMulSumQuarter) ? 0x3e80 : 0x3f00;
      }
      c.comm_id = 42;
      c.comm_rank = r;
      c.comm_nranks = world;
      c.comm_seq = layer;
      c.algo = wr.intern("Ring");
      c.proto = wr.intern("LL");
      c.channels = 2;
      auto cseq = wr.appendCollective(ce, c);
      ASSERT_TRUE(cseq.has_value());
      operand(r, *cseq, 0, db::OperandRole::kInput, partial[static_cast<size_t>(r)]);
      uint64_t reduced = mix(sum, 99);
      if (at(r, layer, Plant::kAllReduceNondet)) reduced ^= 2;
      operand(r, *cseq, 1, db::OperandRole::kOutput, reduced);
      kernel(r, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", *cseq);
      h[static_cast<size_t>(r)] = reduced;
    }
  }
  for (auto& wr : w) ASSERT_TRUE(wr->close().isOk());
}

// The diff of two runs, each written into a directory of its own by its writer.
Result<RunDiff> diffWritten(const std::function<void(const std::string&)>& write_a,
                            const std::function<void(const std::string&)>& write_b) {
  TempDir a, b;
  write_a(a.path().string());
  write_b(b.path().string());
  auto ra = db::Run::open(a.path().string());
  if (!ra.isOk()) return ra.status();
  auto rb = db::Run::open(b.path().string());
  if (!rb.isOk()) return rb.status();
  return diffRuns(*ra, *rb);
}

RunDiff diffOf(Plant plant, int32_t world = 2, int layers = 6) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeModel(a.path().string(), world, layers, seed, {});
  writeModel(b.path().string(), world, layers, seed, plant);
  auto ra = db::Run::open(a.path().string());
  auto rb = db::Run::open(b.path().string());
  EXPECT_TRUE(ra.isOk() && rb.isOk());
  auto d = diffRuns(*ra, *rb);
  EXPECT_TRUE(d.isOk()) << d.status().message();
  return *d;
}

const RankDiff& rankOf(const RunDiff& d, int32_t r) { return d.ranks.at(static_cast<size_t>(r)); }

TEST(Diff, IdenticalRunsAreIdentical) {
  RunDiff d = diffOf({});
  EXPECT_TRUE(d.identical());
  for (const RankDiff& r : d.ranks) {
    EXPECT_FALSE(r.first.has_value());
    EXPECT_EQ(r.counts.size(), 1u);  // only identical pairs
    EXPECT_EQ(r.counts.at(PairStatus::kIdentical), r.events_a);
  }
  EXPECT_NE(formatDiff(d, {}).find("IDENTICAL"), std::string::npos);
}

// A run one of whose files cannot be read (its process killed while creating it) is compared on
// the others, and the diff says which file was left out.
TEST(Diff, AFileLeftOutOfARunIsNamedInTheDiffsWarnings) {
  TempDir a, b;
  testing::Rng rng;
  const uint64_t seed = rng.u64();
  writeModel(a.path().string(), 2, 4, seed, {});
  writeModel(b.path().string(), 2, 4, seed, {});
  { std::ofstream empty(b.file("proc-99.dtrace")); }
  auto ra = db::Run::open(a.path().string());
  auto rb = db::Run::open(b.path().string());
  ASSERT_TRUE(ra.isOk() && rb.isOk()) << (rb.isOk() ? "" : rb.status().message());
  auto d = diffRuns(*ra, *rb);
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_TRUE(d->identical()) << "both ranks compared";
  ASSERT_EQ(d->warnings.size(), 1u);
  EXPECT_EQ(d->warnings[0].rfind("run B: ", 0), 0u) << d->warnings[0];
  EXPECT_NE(d->warnings[0].find(b.file("proc-99.dtrace")), std::string::npos) << d->warnings[0];
  EXPECT_NE(formatDiff(*d, {}).find("proc-99.dtrace"), std::string::npos);
  EXPECT_TRUE(d->complete());

  // Rank 1's own file unreadable (its process killed as it began): rank 0 matches, but the runs
  // are not shown identical (was: IDENTICAL, exit status 0, rank 1 only a warning).
  std::filesystem::resize_file(b.file("proc-101.dtrace"), 0);
  auto rb2 = db::Run::open(b.path().string());
  ASSERT_TRUE(rb2.isOk()) << rb2.status().message();
  auto partial = diffRuns(*ra, *rb2);
  ASSERT_TRUE(partial.isOk()) << partial.status().message();
  EXPECT_TRUE(partial->identical()) << "no divergence on rank 0";
  EXPECT_FALSE(partial->complete());
  EXPECT_EQ(partial->uncompared_ranks, (std::vector<int32_t>{1}));
  const std::string text = formatDiff(*partial, {"A", "B"});
  EXPECT_EQ(text.rfind("INCOMPLETE: A and B match on the 1 rank(s) compared, but rank(s) 1 are not in both runs", 0), 0u)
      << text;
  EXPECT_EQ(diffJson(*partial, {"A", "B"})["complete"], false);
  EXPECT_EQ(diffJson(*partial, {"A", "B"})["identical"], false) << "not identical: incomplete";
  EXPECT_EQ(diffJson(*partial, {"A", "B"})["verdict"], "incomplete");
  EXPECT_EQ(diffJson(*d, {"A", "B"})["verdict"], "identical");
}

// Runs fingerprinted under different --row-digests are refused with a message that says how to
// record them; the same setting (or a trace from before the option, which fingerprinted every
// row, against "all") compares as usual.
TEST(Diff, RunsRecordedWithDifferentRowDigestsAreRefused) {
  testing::Rng rng;
  const uint64_t seed = rng.u64();
  struct Case {
    const char* a;
    const char* b;
    bool refused;
  };
  for (const Case& c : {Case{"all", "tokens", true}, Case{nullptr, "tokens", true},
                        Case{"tokens", "tokens", false}, Case{nullptr, "all", false}}) {
    SCOPED_TRACE(fmt::format("{} against {}", c.a ? c.a : "(none)", c.b));
    TempDir a, b;
    writeModel(a.path().string(), 2, 3, seed, {}, c.a);
    writeModel(b.path().string(), 2, 3, seed, {}, c.b);
    auto ra = db::Run::open(a.path().string());
    auto rb = db::Run::open(b.path().string());
    ASSERT_TRUE(ra.isOk() && rb.isOk());
    auto d = diffRuns(*ra, *rb);
    if (c.refused) {
      ASSERT_FALSE(d.isOk());
      EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(d.status().message().find("Record both runs with the same --row-digests"),
                std::string::npos)
          << d.status().message();
    } else {
      ASSERT_TRUE(d.isOk()) << d.status().message();
      EXPECT_TRUE(d->identical());
    }
  }
}

// Runs recorded with different --graph-weights-every compare (a weight's digest is the same
// whoever takes it) with a warning that names both settings; the same setting, or a trace from
// before the option against 1, gives no such warning.
TEST(Diff, RunsRecordedWithDifferentGraphWeightSamplingAreComparedWithAWarning) {
  testing::Rng rng;
  const uint64_t seed = rng.u64();
  struct Case {
    const char* a;
    const char* b;
    bool warned;
  };
  for (const Case& c : {Case{"16", "1", true}, Case{nullptr, "4", true}, Case{"8", "8", false},
                        Case{nullptr, "1", false}}) {
    SCOPED_TRACE(fmt::format("{} against {}", c.a ? c.a : "(none)", c.b));
    auto write = [&](const char* every) {
      return [&, every](const std::string& dir) { writeModel(dir, 2, 3, seed, {}, "tokens", every); };
    };
    auto d = diffWritten(write(c.a), write(c.b));
    ASSERT_TRUE(d.isOk()) << d.status().message();
    EXPECT_TRUE(d->identical());
    const auto said = std::find_if(d->warnings.begin(), d->warnings.end(), [](const std::string& w) {
      return w.find("--graph-weights-every") != std::string::npos;
    });
    EXPECT_EQ(said != d->warnings.end(), c.warned);
    if (said != d->warnings.end()) {
      EXPECT_NE(said->find(fmt::format("every {} replay(s)", c.a ? c.a : "1")), std::string::npos) << *said;
    }
  }
}

// A run whose recorder could not follow some NCCL communicators compares, with a warning that
// names the rank, the run and the count; a run without them gives none.
TEST(Diff, RunsWithCommunicatorsTheRecorderCouldNotFollowAreComparedWithAWarning) {
  testing::Rng rng;
  const uint64_t seed = rng.u64();
  const int64_t n = rng.range(1, 9);
  auto write = [&](int64_t unfollowed) {
    return [&, unfollowed](const std::string& dir) {
      writeModel(dir, 2, 3, seed, {}, "tokens", nullptr, unfollowed);
    };
  };
  auto d = diffWritten(write(0), write(n));
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_TRUE(d->identical());
  std::vector<std::string> said;
  for (const std::string& w : d->warnings) {
    if (w.find("could not follow") != std::string::npos) said.push_back(w);
  }
  ASSERT_EQ(said.size(), 1u) << fmt::format("{}", fmt::join(d->warnings, "\n"));
  EXPECT_NE(said[0].find(fmt::format("rank 0: run B has {} NCCL communicator(s)", n)), std::string::npos)
      << said[0];
}

TEST(Diff, GemmAlgorithmChangeIsKernelSelectionOnTheRightRank) {
  RunDiff d = diffOf({1, 3, Plant::kGemmAlgo});
  ASSERT_EQ(d.origin_rank, 1);
  const RankDiff& r1 = rankOf(d, 1);
  ASSERT_TRUE(r1.first);
  EXPECT_EQ(r1.first->status, PairStatus::kKernelSelection);
  EXPECT_EQ(r1.first->collectives_before, 3);
  EXPECT_NE(r1.why.find("split-K 1 in A, algo 66 tile 27 split-K 4"), std::string::npos) << "why: " << r1.why;
  ASSERT_EQ(d.selection_changes.size(), 1u);
  EXPECT_EQ(d.selection_changes[0].count, 1);
  // Rank 0 is only touched through the all-reduce: propagated, not blamed.
  const RankDiff& r0 = rankOf(d, 0);
  ASSERT_TRUE(r0.first);
  EXPECT_EQ(r0.first->status, PairStatus::kPropagated);
}

TEST(Diff, NondeterministicGemmIsNamedAndEverythingAfterItPropagates) {
  RunDiff d = diffOf({0, 2, Plant::kGemmNondet});
  ASSERT_EQ(d.origin_rank, 0);
  const RankDiff& r0 = rankOf(d, 0);
  EXPECT_EQ(r0.first->status, PairStatus::kNondeterministic);
  EXPECT_NE(r0.first_a.find("GEMM cublasLtMatmul m=8 n=1024 k=4096"), std::string::npos) << r0.first_a;
  for (size_t i = 1; i < r0.differing.size(); ++i) {
    EXPECT_EQ(r0.differing[i].status, PairStatus::kPropagated) << i;
  }
  // Rank 1's all-reduce at layer 2 saw equal local inputs but rank 0's differed.
  const RankDiff& r1 = rankOf(d, 1);
  ASSERT_TRUE(r1.first);
  EXPECT_EQ(r1.first->status, PairStatus::kPropagated);
  EXPECT_EQ(r1.first->collectives_before, 2);
}

TEST(Diff, NondeterministicAllReduceOnAllRanksBlamesTheCollective) {
  // Plant on both ranks at the same collective: as a racy all-reduce would.
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeModel(a.path().string(), 2, 5, seed, {});
  writeModel(b.path().string(), 2, 5, seed, {0, 1, Plant::kAllReduceNondet});
  auto d = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()));
  ASSERT_TRUE(d.isOk());
  ASSERT_EQ(d->origin_rank, 0);
  const RankDiff& r0 = rankOf(*d, 0);
  EXPECT_EQ(r0.first->status, PairStatus::kNondeterministic);
  EXPECT_NE(r0.first_a.find("AllReduce bf16"), std::string::npos) << r0.first_a;
  EXPECT_NE(r0.first_a.find("comm seq 1"), std::string::npos) << r0.first_a;
}

TEST(Diff, ExtraKernelIsAScheduleDifferenceAndAlignmentRecovers) {
  RunDiff d = diffOf({1, 4, Plant::kExtraKernel});
  ASSERT_EQ(d.origin_rank, 1);
  const RankDiff& r1 = rankOf(d, 1);
  EXPECT_EQ(r1.first->status, PairStatus::kSchedule);
  EXPECT_EQ(r1.first->a, -1);
  EXPECT_EQ(r1.differing.size(), 1u) << "only the extra kernel differs; the rest realigned";
  EXPECT_TRUE(rankOf(d, 0).differing.empty());
}

// A writer of a 2-rank, 4-layer model with `what` planted at rank 1, layer 2 (for diffWritten).
std::function<void(const std::string&)> plantedAtRank1Layer2(uint64_t seed, Plant::What what) {
  return [seed, what](const std::string& dir) { writeModel(dir, 2, 4, seed, {1, 2, what}); };
}

// Sums scaled by different PreMulSum scalars are different ops (the scalar is part of a
// collective's alignment key, as its operator is): a schedule difference where the scalar changed,
// the op of each run present in that run only, its description showing its scalar; none where
// the scalar is the same.
TEST(Diff, APreMulSumScalarChangeIsADifference) {
  testing::Rng rng;
  const uint64_t seed = rng.u64();
  auto model = [seed](Plant::What what) { return plantedAtRank1Layer2(seed, what); };
  auto same = diffWritten(model(Plant::kPreMulSumQuarter), model(Plant::kPreMulSumQuarter));
  ASSERT_TRUE(same.isOk()) << same.status().message();
  EXPECT_TRUE(same->identical());
  auto d = diffWritten(model(Plant::kPreMulSumQuarter), model(Plant::kPreMulSumHalf));
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_FALSE(d->identical());
  EXPECT_EQ(rankOf(*d, 0).differing_events, 0);
  const RankDiff& r1 = rankOf(*d, 1);
  ASSERT_TRUE(r1.first);
  EXPECT_EQ(r1.first->status, PairStatus::kSchedule);
  EXPECT_EQ(r1.first->b, -1);
  EXPECT_NE(r1.first_a.find("AllReduce bf16 count=32768 premulsum(0.25)"), std::string::npos) << r1.first_a;
  EXPECT_EQ(r1.differing_events, 2) << "the op of A and the op of B, the rest realigned";
}

// A GEMM whose cuBLASLt epilogue changed (none in A, a bias in B) computes something else: a
// schedule difference naming the epilogue, as for any other change of an op's key. A trace that
// predates the epilogue's recording pairs with one that records none, or a fused one.
TEST(Diff, AGemmEpilogueChangeIsADifference) {
  testing::Rng rng;
  const uint64_t seed = rng.u64();
  auto model = [seed](Plant::What what) { return plantedAtRank1Layer2(seed, what); };
  auto unrecorded = diffWritten(model(Plant::kNone), model(Plant::kGemmEpilogueUnrecorded));
  ASSERT_TRUE(unrecorded.isOk()) << unrecorded.status().message();
  EXPECT_TRUE(unrecorded->identical());
  // A run recorded before epilogues were (its GEMMs unrecorded: here rank 0's first) pairs its GEMMs
  // with a newer run's fused ones: the epilogue then stays out of every key.
  auto at00 = [seed](Plant::What what) {
    return [seed, what](const std::string& dir) { writeModel(dir, 2, 4, seed, {0, 0, what}); };
  };
  auto older = diffWritten(at00(Plant::kGemmEpilogueUnrecorded), at00(Plant::kGemmBiasEpilogue));
  ASSERT_TRUE(older.isOk()) << older.status().message();
  EXPECT_TRUE(older->identical());
  // Each way round: the first difference is run A's GEMM, present in A only.
  for (bool bias_in_a : {true, false}) {
    SCOPED_TRACE(bias_in_a ? "bias in A" : "bias in B");
    auto d = bias_in_a ? diffWritten(model(Plant::kGemmBiasEpilogue), model(Plant::kNone))
                       : diffWritten(model(Plant::kNone), model(Plant::kGemmBiasEpilogue));
    ASSERT_TRUE(d.isOk()) << d.status().message();
    EXPECT_FALSE(d->identical());
    EXPECT_EQ(rankOf(*d, 0).differing_events, 0);
    const RankDiff& r1 = rankOf(*d, 1);
    ASSERT_TRUE(r1.first);
    EXPECT_EQ(r1.first->status, PairStatus::kSchedule);
    EXPECT_EQ(r1.first->b, -1);
    const bool named = r1.first_a.find("cublasLtMatmul m=8 n=1024 k=4096 NN bf16 epilogue bias") !=
                       std::string::npos;
    EXPECT_EQ(named, bias_in_a) << r1.first_a;
    EXPECT_EQ(r1.differing_events, 2) << "the op of A and the op of B, the rest realigned";
  }
}

TEST(Diff, KernelVariantOfTheSameFamilyIsKernelSelection) {
  RunDiff d = diffOf({0, 5, Plant::kKernelVariant});
  const RankDiff& r0 = rankOf(d, 0);
  ASSERT_TRUE(r0.first);
  EXPECT_EQ(r0.first->status, PairStatus::kKernelSelection);
  EXPECT_NE(r0.why.find("rmsnorm_kernel<bf16, 4> in A, rmsnorm_kernel<bf16, 8> in B"), std::string::npos)
      << "why: " << r0.why;
}

TEST(Diff, JsonCarriesTheSameVerdict) {
  RunDiff d = diffOf({1, 2, Plant::kGemmAlgo});
  nlohmann::json j = diffJson(d, {"runA", "runB"});
  EXPECT_EQ(j["identical"], false);
  EXPECT_EQ(j["origin_rank"], 1);
  EXPECT_EQ(j["ranks"][1]["first"]["status"], "kernel selection changed");
  EXPECT_EQ(j["ranks"][1]["first"]["collectives_before"], 2);
  EXPECT_EQ(j["selection_changes"].size(), 1u);
}

TEST(Diff, KernelFamilyDropsTemplatesParametersAndDigits) {
  EXPECT_EQ(kernelFamily("void gemm_128x256<bf16, 4>(float*, int)"), "void gemm_x<bf, >");
  EXPECT_EQ(kernelFamily("sm90_xmma_tilesize64x128"), "sm_xmma_tilesizex");
  EXPECT_NE(kernelFamily("void elementwise_kernel<8, silu_functor>(int)"),
            kernelFamily("void elementwise_kernel<8, add_functor>(int)"));
}

}  // namespace
}  // namespace detrace::replay

namespace detrace::replay {
namespace {

// One rank, `layers` GEMMs, each with per-row fingerprints. The request's row is row 0 at bs=1 and
// row `slot` among `batch` rows otherwise; `variant_layer` makes the request's output row depend on
// the batch from that layer on (a batch-variant kernel). `weights`: each GEMM also reads a weight
// recorded as under --row-digests tokens (its whole digest, no rows), the same at every batch size
// but at `bad_weight_layer`, whose weight is another tensor of the same size.
void writeBatchModel(const std::string& dir, int layers, int batch, int slot, int variant_layer,
                     uint64_t seed, bool tokens_in_n = false, bool weights = false,
                     int bad_weight_layer = -1) {
  auto w = db::TraceWriter::create(dir + "/proc-1.dtrace");
  ASSERT_TRUE(w.isOk());
  (*w)->setRank({0, 1, 0, 0, 1, "h", "GPU", ""});
  uint64_t request = mix(seed, 1);
  std::vector<uint64_t> others;
  for (int i = 0; i < batch; ++i) others.push_back(mix(seed + 1000, static_cast<uint64_t>(i)));
  for (int layer = 0; layer < layers; ++layer) {
    db::Event e;
    e.kind = db::EventKind::kGemm;
    e.name = (*w)->intern("cublasLtMatmul");
    db::Gemm g;
    g.m = tokens_in_n ? 4096 : batch;  // PyTorch's y = x W^T puts the tokens in cuBLAS's n
    g.n = tokens_in_n ? batch : 4096;
    g.k = 4096;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = batch > 1 ? 21 : 6;  // the heuristic picks by m: legitimately different
    auto seq = (*w)->appendGemm(e, g);
    ASSERT_TRUE(seq.has_value());
    std::vector<uint64_t> in(static_cast<size_t>(batch)), out(static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      in[static_cast<size_t>(r)] = r == slot ? request : others[static_cast<size_t>(r)];
      out[static_cast<size_t>(r)] = mix(in[static_cast<size_t>(r)], static_cast<uint64_t>(layer));
    }
    if (batch > 1 && layer == variant_layer) out[static_cast<size_t>(slot)] ^= 4;
    db::Operand a;
    a.seq = *seq;
    a.slot = 0;
    a.role = db::OperandRole::kInput;
    a.row_digests = in;
    a.has_digest = true;
    a.digest = mix(in[0], static_cast<uint64_t>(batch));
    db::Operand d = a;
    d.slot = 2;
    d.role = db::OperandRole::kOutput;
    d.row_digests = out;
    d.digest = mix(out[0], static_cast<uint64_t>(batch));
    EXPECT_TRUE((*w)->appendOperand(a));
    if (weights) {
      db::Operand wt;
      wt.seq = *seq;
      wt.slot = 1;
      wt.role = db::OperandRole::kInput;
      wt.bytes = 4096 * 4096 * 2;
      wt.has_digest = true;
      wt.digest = mix(seed + 77, static_cast<uint64_t>(layer)) ^ (layer == bad_weight_layer ? 1u : 0u);
      EXPECT_TRUE((*w)->appendOperand(wt));
    }
    EXPECT_TRUE((*w)->appendOperand(d));
    request = out[static_cast<size_t>(slot)];
    for (int r = 0; r < batch; ++r) {
      if (r != slot) others[static_cast<size_t>(r)] = out[static_cast<size_t>(r)];
    }
  }
  ASSERT_TRUE((*w)->close().isOk());
}

TEST(DiffBatch, BatchInvariantRunsAreIdenticalInBatchMode) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeBatchModel(a.path().string(), 6, 1, 0, -1, seed);
  writeBatchModel(b.path().string(), 6, 8, 5, -1, seed);
  auto d = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()));
  ASSERT_TRUE(d.isOk()) << d.status().message();
  EXPECT_TRUE(d->batch_mode) << "GEMMs differing only in m were not detected as a batch pair";
  EXPECT_TRUE(d->identical()) << formatDiff(*d, {});
}

// Weights with their whole digest alone (--row-digests tokens, the default): equal ones leave the
// verdict to the token rows, both ways; a weight that differs between the runs makes its GEMM's
// inputs differ (propagated), not its kernel batch-variant, though the request's rows match.
TEST(DiffBatch, WeightsWithoutRowsAreComparedWhole) {
  TempDir a, b, c, d;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  int variant = static_cast<int>(rng.range(1, 4));
  writeBatchModel(a.path().string(), 6, 1, 0, -1, seed, false, true);
  writeBatchModel(b.path().string(), 6, 8, 5, -1, seed, false, true);
  writeBatchModel(c.path().string(), 6, 8, 2, variant, seed, false, true);
  writeBatchModel(d.path().string(), 6, 8, 2, -1, seed, false, true, variant);
  auto same = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()));
  ASSERT_TRUE(same.isOk()) << same.status().message();
  ASSERT_TRUE(same->batch_mode);
  EXPECT_TRUE(same->identical()) << formatDiff(*same, {});
  auto planted = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(c.path().string()));
  ASSERT_TRUE(planted.isOk());
  ASSERT_FALSE(planted->identical());
  EXPECT_EQ(planted->ranks[0].first->status, PairStatus::kBatchVariant);
  EXPECT_EQ(planted->ranks[0].first->a, variant);
  auto weight = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(d.path().string()));
  ASSERT_TRUE(weight.isOk());
  ASSERT_FALSE(weight->identical()) << "a differing weight went unnoticed";
  EXPECT_EQ(weight->ranks[0].first->status, PairStatus::kPropagated) << weight->ranks[0].why;
  EXPECT_EQ(weight->ranks[0].first->a, variant) << "seq of the GEMM with the other weight";
}

TEST(DiffBatch, FirstBatchVariantOpIsNamedWithTheKernelChoices) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  int variant = static_cast<int>(rng.range(1, 4));
  writeBatchModel(a.path().string(), 6, 1, 0, -1, seed);
  writeBatchModel(b.path().string(), 6, 8, 3, variant, seed);
  auto d = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()));
  ASSERT_TRUE(d.isOk());
  ASSERT_TRUE(d->batch_mode);
  ASSERT_EQ(d->origin_rank, 0);
  const RankDiff& r = d->ranks[0];
  EXPECT_EQ(r.first->status, PairStatus::kBatchVariant);
  EXPECT_EQ(r.first->a, variant) << "seq of the planted GEMM";
  EXPECT_NE(r.why.find("algo 6 in A, algo 21 in B"), std::string::npos) << r.why;
  for (size_t i = 1; i < r.differing.size(); ++i) EXPECT_EQ(r.differing[i].status, PairStatus::kPropagated);
  // Forcing batch mode off compares whole tensors: every GEMM differs in shape, so none align.
  auto whole = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()),
                        {.rank = std::nullopt, .batch = false});
  ASSERT_TRUE(whole.isOk());
  EXPECT_EQ(whole->ranks[0].first->status, PairStatus::kSchedule);
}

}  // namespace
}  // namespace detrace::replay

namespace detrace::replay {
namespace {

TEST(DiffMany, RunsAreGroupedIntoBitIdenticalClassesAndTheSplitIsExplained) {
  testing::Rng rng;
  uint64_t seed = rng.u64();
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<db::Run> runs;
  // Runs 0, 2, 3 clean; runs 1 and 4 with the same nondeterministic all-reduce outcome.
  for (int i = 0; i < 5; ++i) {
    dirs.push_back(std::make_unique<TempDir>());
    Plant plant;
    if (i == 1 || i == 4) plant = {0, 2, Plant::kAllReduceNondet};
    writeModel(dirs.back()->path().string(), 2, 4, seed, plant);
    runs.push_back(*db::Run::open(dirs.back()->path().string()));
  }
  auto groups = groupRuns(runs);
  ASSERT_TRUE(groups.isOk()) << groups.status().message();
  ASSERT_EQ(groups->classes.size(), 2u);
  EXPECT_EQ(groups->classes[0], (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(groups->classes[1], (std::vector<size_t>{1, 4}));
  ASSERT_EQ(groups->explanations.size(), 1u);
  const RunDiff& why = groups->explanations[0];
  ASSERT_EQ(why.origin_rank, 0);
  EXPECT_EQ(why.ranks[0].first->status, PairStatus::kNondeterministic);
  EXPECT_EQ(why.ranks[0].first->collectives_before, 2);
}

}  // namespace
}  // namespace detrace::replay

namespace detrace::replay {
namespace {

TEST(DiffBadInput, DifferentProgramsMissingRanksAndNoFingerprintsAreSaid) {
  TempDir a, b, c;
  testing::Rng rng;
  writeModel(a.path().string(), 2, 6, rng.u64(), {});
  writeModel(b.path().string(), 1, 6, rng.u64(), {});  // other world size, other content
  auto d = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()));
  ASSERT_TRUE(d.isOk()) << d.status().message();
  std::string all;
  for (const auto& w : d->warnings) all += w + "\n";
  EXPECT_NE(all.find("different world sizes (2 and 1)"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 1 is missing from run B"), std::string::npos) << all;
  EXPECT_FALSE(d->identical());  // a partial verdict for rank 0 still comes

  // A run without any operand fingerprints.
  auto w = db::TraceWriter::create(c.path().string() + "/p.dtrace");
  ASSERT_TRUE(w.isOk());
  (*w)->setRank({0, 1, 0, 0, 1, "h", "GPU", ""});
  db::Event e;
  e.kind = db::EventKind::kKernel;
  e.name = (*w)->intern("k");
  (void)(*w)->append(e);
  ASSERT_TRUE((*w)->close().isOk());
  auto d2 = diffRuns(*db::Run::open(c.path().string()), *db::Run::open(c.path().string()));
  ASSERT_TRUE(d2.isOk());
  EXPECT_TRUE(d2->identical());
  std::string said;
  for (const std::string& w2 : d2->warnings) said += w2 + "\n";
  EXPECT_NE(said.find("no fingerprints"), std::string::npos) << said;
  EXPECT_NE(said.find("are the same run"), std::string::npos) << said;  // diffed against itself

  // A run whose processes did no GPU work (their files hold no events, no rank, no device) is
  // refused on either side, not compared as an empty rank 0.
  TempDir idle;
  const int idle_files = static_cast<int>(rng.range(1, 3));
  for (int i = 0; i < idle_files; ++i) {
    auto iw = db::TraceWriter::create(fmt::format("{}/proc-{}.dtrace", idle.path().string(), 100 + i));
    ASSERT_TRUE(iw.isOk());
    ASSERT_TRUE((*iw)->close().isOk());
  }
  auto idle_run = db::Run::open(idle.path().string());
  ASSERT_TRUE(idle_run.isOk()) << idle_run.status().message();
  for (bool idle_first : {true, false}) {
    auto d4 = idle_first ? diffRuns(*idle_run, *db::Run::open(a.path().string()))
                         : diffRuns(*db::Run::open(a.path().string()), *idle_run);
    ASSERT_FALSE(d4.isOk());
    EXPECT_EQ(d4.status().code(), ErrorCode::kNoData);
    EXPECT_NE(d4.status().message().find(idle.path().string() + " holds no GPU work"), std::string::npos)
        << d4.status().message();
    EXPECT_NE(d4.status().message().find(fmt::format("its {} trace file(s) have no events", idle_files)),
              std::string::npos) << d4.status().message();
  }

  // Unrelated programs on the same world size: few library ops align.
  TempDir e1, e2;
  writeModel(e1.path().string(), 1, 8, rng.u64(), {});
  writeBatchModel(e2.path().string(), 8, 4, 0, -1, rng.u64());
  auto d3 = diffRuns(*db::Run::open(e1.path().string()), *db::Run::open(e2.path().string()),
                     {.rank = std::nullopt, .batch = false});
  ASSERT_TRUE(d3.isOk()) << d3.status().message();
  std::string w3;
  for (const auto& x : d3->warnings) w3 += x + "\n";
  EXPECT_NE(w3.find("look like runs of different programs"), std::string::npos) << w3;
}

}  // namespace
}  // namespace detrace::replay

namespace detrace::replay {
namespace {

TEST(Diff, DivergenceEnteringThroughRawKernelsPointsAtTheStretch) {
  RunDiff d = diffOf({1, 3, Plant::kRawKernel});
  ASSERT_EQ(d.origin_rank, 1);
  const RankDiff& r1 = rankOf(d, 1);
  EXPECT_EQ(r1.first->status, PairStatus::kPropagated);
  EXPECT_NE(r1.why.find("through 1 kernel(s) without fingerprints (rmsnorm_kernel<bf16, 4>)"),
            std::string::npos)
      << "why: " << r1.why;
  ASSERT_TRUE(r1.entered_after.has_value());
  EXPECT_LT(*r1.entered_after, r1.first->a);
}

}  // namespace
}  // namespace detrace::replay

namespace detrace::replay {
namespace {

TEST(DiffBatch, TokensInNAsPyTorchCallsCublas) {
  TempDir a, b;
  testing::Rng rng;
  uint64_t seed = rng.u64();
  writeBatchModel(a.path().string(), 5, 1, 0, -1, seed, /*tokens_in_n=*/true);
  writeBatchModel(b.path().string(), 5, 16, 9, 2, seed, /*tokens_in_n=*/true);
  auto d = diffRuns(*db::Run::open(a.path().string()), *db::Run::open(b.path().string()));
  ASSERT_TRUE(d.isOk());
  ASSERT_TRUE(d->batch_mode);
  ASSERT_TRUE(d->ranks[0].first.has_value());
  EXPECT_EQ(d->ranks[0].first->status, PairStatus::kBatchVariant);
  EXPECT_EQ(d->ranks[0].first->a, 2);
}

}  // namespace
}  // namespace detrace::replay
