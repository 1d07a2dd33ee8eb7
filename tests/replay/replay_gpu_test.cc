// detrace replay on the GPU (label gpu; SKIPPED without a device): synthetic runs whose recorded
// outputs come from known kernels, replayed with every implementation. The planted racy reduction
// must give several outputs over repeats while each fixed-order kernel gives one (and the same
// bits as its CPU twin); cuBLASLt with the recorded algorithm must reproduce a recorded cuBLASLt
// GEMM; for a batch-size pair the batch-invariant GEMMs must keep the request's rows while the
// planted split-K GEMM must not.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "../common/gpu_test.h"
#include "../db/test_util.h"
#include "detrace/kernels/gemm.h"
#include "detrace/kernels/gemm_cublaslt.h"
#include "detrace/replay/replay.h"
#include "replay_synth.h"

namespace detrace {
namespace {

namespace synth = testing::synth;
using replay::ImplResult;
using testing::TempDir;

const ImplResult& find(const replay::ReplayResult& r, const std::string& name) {
  for (const auto& i : r.impls) {
    if (i.name == name) return i;
  }
  static const ImplResult kMissing;
  ADD_FAILURE() << "no implementation " << name;
  return kMissing;
}

void print(const replay::ReplayResult& r) { std::printf("%s\n", replay::formatReplay(r).c_str()); }

// A `world`-rank run with one bf16 AllReduce (event 0) recorded in ring order from rank 2.
db::Run allReduceRun(const TempDir& dir, int world, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<synth::Bytes> sends = synth::cancellingSends(rng, world, count);
  const synth::Bytes recv =
      synth::reduceInOrder(sends, kernels::ReduceOrder::kRing, world > 2 ? 2 : 0);
  for (int r = 0; r < world; ++r) {
    db::WriterOptions options;
    options.policy = db::OverflowPolicy::kBlock;
    auto w = db::TraceWriter::create(dir.file(fmt::format("proc-{}.dtrace", 10 + r)), options);
    EXPECT_TRUE(w.isOk());
    (*w)->setRank({r, world, r, r, 10 + r, "h", "GPU", ""});
    synth::CollSpec c;
    c.count = count;
    c.rank = r;
    c.nranks = world;
    synth::appendCollective(**w, c, sends[static_cast<size_t>(r)], recv, true);
    EXPECT_TRUE((*w)->close().isOk());
  }
  auto run = db::Run::open(dir.path().string());
  EXPECT_TRUE(run.isOk()) << run.status().message();
  return std::move(*run);
}

TEST(ReplayGpu, RacyReductionHasManyOutputsFixedOrdersOne) {
  DETRACE_REQUIRE_GPU();
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = allReduceRun(dir, 8, int64_t{1} << 20, rng.seed());
  replay::ReplayOptions options;
  options.repeat = 20;
  options.impls = {"gpu", "ring2/cpu", "tree/cpu"};
  auto r = replay::replayEvent(run, {0, 0}, options);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  print(*r);
  for (const auto& i : r->impls) {
    if (!i.gpu || i.name == "nccl" || i.name == "det-allreduce") continue;  // need 8 GPUs
    ASSERT_TRUE(i.ran()) << i.name << ": " << i.skipped << i.error;
    EXPECT_EQ(i.runs, 20) << i.name;
    if (i.name == "planted-racy") {
      EXPECT_GE(i.distinct, 2) << "the race never showed in 20 runs";
    } else {
      EXPECT_EQ(i.distinct, 1) << i.name;
    }
  }
  EXPECT_EQ(find(*r, "ring2/gpu").matches_recorded, 20);
  EXPECT_EQ(find(*r, "ring2/gpu").digest, find(*r, "ring2/cpu").digest);  // GPU = its CPU twin
  EXPECT_EQ(find(*r, "tree/gpu").digest, find(*r, "tree/cpu").digest);
  EXPECT_EQ(find(*r, "tree/gpu").matches_recorded, 0);
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 8) {
    EXPECT_EQ(find(*r, "nccl").skipped, fmt::format("needs 8 GPUs, this machine has {}", gpus));
    EXPECT_EQ(find(*r, "det-allreduce").skipped, fmt::format("needs 8 GPUs, this machine has {}", gpus));
  }
}

TEST(ReplayGpu, OneRankAllReduceThroughNccl) {
  DETRACE_REQUIRE_GPU();
  testing::Rng rng;
  TempDir dir;
  db::Run run = allReduceRun(dir, 1, 65536, rng.seed());
  replay::ReplayOptions options;
  options.impls = {"nccl", "rank"};
  auto r = replay::replayEvent(run, {0, 0}, options);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  print(*r);
  const ImplResult& nccl = find(*r, "nccl");
  if (nccl.skipped == "detrace was built without NCCL") GTEST_SKIP() << nccl.skipped;
  ASSERT_TRUE(nccl.ran()) << nccl.skipped << nccl.error;
  EXPECT_EQ(nccl.matches_recorded, 3);  // a one-rank sum is the input
  EXPECT_EQ(find(*r, "rank/gpu").matches_recorded, 3);
}

// On a machine with several GPUs, a recorded AllReduce is replayed across them by NCCL and by
// kernels' PeerAllReduce (det-allreduce); the latter gives rank/gpu's bits, the same every run (a
// count that does not divide by the ranks exercises its remainder path).
TEST(ReplayGpu, AllReduceAcrossGpusDeterministicEqualsRankOrder) {
  DETRACE_REQUIRE_GPU();
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << gpus;
  const int world = std::min(gpus, 8);
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = allReduceRun(dir, world, (int64_t{1} << 20) + 3, rng.seed());
  replay::ReplayOptions options;
  options.repeat = 5;
  options.impls = {"nccl", "det-allreduce", "rank"};
  auto r = replay::replayEvent(run, {world - 1, 0}, options);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  print(*r);
  const ImplResult& det = find(*r, "det-allreduce");
  const ImplResult& nccl = find(*r, "nccl");
  ASSERT_TRUE(det.ran()) << det.skipped << det.error;
  ASSERT_TRUE(nccl.ran()) << nccl.skipped << nccl.error;
  EXPECT_EQ(det.runs, 5);
  EXPECT_EQ(det.distinct, 1);
  EXPECT_EQ(det.digest, find(*r, "rank/gpu").digest);
  EXPECT_EQ(det.digest, find(*r, "rank/cpu").digest);
  EXPECT_EQ(nccl.runs, 5);
}

// Device buffers for making recorded GEMM outputs with kernels/.
struct Dev {
  void* p = nullptr;
  explicit Dev(const synth::Bytes& host) {
    EXPECT_EQ(cudaMalloc(&p, host.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { (void)cudaFree(p); }
};

// Runs cuBLASLt's heuristic on (weights N x K, tokens M x K) as the "recorded kernel": returns D
// (M x N bf16) and the algorithm it used, as a db::Gemm's algorithm fields.
synth::Bytes heuristicGemm(kernels::CublasLtGemm& lt, int64_t m, int64_t n, int64_t k,
                           const synth::Bytes& tokens, const synth::Bytes& weights, db::Gemm& algo) {
  Dev a(tokens), b(weights), d(synth::Bytes(static_cast<size_t>(m * n * 2)));
  kernels::GemmArgs args{m, n, k, kernels::DType::kBF16, kernels::DType::kBF16, a.p, b.p, d.p};
  auto info = lt.heuristicAlgo(args);
  EXPECT_TRUE(info.isOk()) << info.status().message();
  EXPECT_TRUE(lt.gemmHeuristic(args, nullptr).isOk());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  synth::Bytes out(static_cast<size_t>(m * n * 2));
  EXPECT_EQ(cudaMemcpy(out.data(), d.p, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  algo.algo_id = info->algo_id;
  algo.tile = static_cast<int32_t>(info->tile_id);
  algo.stages = static_cast<int32_t>(info->stages_id);
  algo.split_k = info->splitk_num;
  algo.reduction_scheme = static_cast<int32_t>(info->reduction_scheme);
  algo.swizzle = static_cast<int32_t>(info->cta_swizzling);
  algo.custom_option = static_cast<int32_t>(info->custom_option);
  algo.algo_source = 2;
  std::printf("recorded kernel at M = %ld: %s\n", static_cast<long>(m), info->toString().c_str());
  return out;
}

// A one-rank run of GEMMs (TN, bf16 -> bf16) at the given token counts, sharing the weights;
// the request's token is row 0 of the first and row `at` of the others.
db::Run gemmPairRun(const TempDir& dir, int64_t n, int64_t k, std::vector<int64_t> tokens,
                    int64_t at, uint32_t seed) {
  std::mt19937 rng(seed);
  auto lt = kernels::CublasLtGemm::create();
  EXPECT_TRUE(lt.isOk()) << lt.status().message();
  const synth::Bytes weights = synth::randomBf16(rng, n * k);
  const synth::Bytes request = synth::randomBf16(rng, k);
  db::WriterOptions options;
  options.policy = db::OverflowPolicy::kBlock;
  auto w = db::TraceWriter::create(dir.file("proc-1.dtrace"), options);
  EXPECT_TRUE(w.isOk());
  (*w)->setRank({0, 1, 0, 0, 1, "h", "GPU", ""});
  for (size_t s = 0; s < tokens.size(); ++s) {
    const int64_t m = tokens[s];
    synth::Bytes act = synth::randomBf16(rng, m * k);
    const int64_t row = s == 0 ? 0 : at;
    std::copy(request.begin(), request.end(), act.begin() + row * k * 2);
    db::Gemm algo;
    synth::GemmData data{weights, act, heuristicGemm(*lt, m, n, k, act, weights, algo)};
    synth::GemmSpec spec;  // cuBLAS terms: m = N (weights' rows), n = M (tokens)
    spec.m = n;
    spec.n = m;
    spec.k = k;
    spec.lda = spec.ldb = k;
    spec.ldd = n;
    spec.d_dtype = db::DType::kBF16;
    synth::appendGemm(**w, spec, data, true, true, &algo);
  }
  EXPECT_TRUE((*w)->close().isOk());
  auto run = db::Run::open(dir.path().string());
  EXPECT_TRUE(run.isOk()) << run.status().message();
  return std::move(*run);
}

TEST(ReplayGpu, RecordedCublasLtAlgorithmReproducesTheRecording) {
  DETRACE_REQUIRE_GPU();
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  db::Run run = gemmPairRun(dir, 1024, 1024, {16}, 0, rng.seed());
  auto r = replay::replayEvent(run, {0, 0}, {});
  ASSERT_TRUE(r.isOk()) << r.status().message();
  print(*r);
  EXPECT_EQ(find(*r, "recorded").matches_recorded, 3) << find(*r, "recorded").error;
  EXPECT_EQ(find(*r, "cublaslt-heuristic").matches_recorded, 3);
  for (const char* name : {"recorded", "cublaslt-heuristic", "cublaslt-pinned", "wgmma", "mma-sync",
                           "planted-splitk", "cpu-fp32"}) {
    const ImplResult& i = find(*r, name);
    if (std::string(name) == "wgmma" && !i.skipped.empty()) continue;  // not a Hopper GPU
    ASSERT_TRUE(i.ran()) << name << ": " << i.skipped << i.error;
    EXPECT_EQ(i.distinct, 1) << name;
    EXPECT_LT(i.to_reference->max_rel, 1e-2) << name;
  }
}

TEST(ReplayGpu, BatchPairSeparatesInvariantKernelsFromVariantOnes) {
  DETRACE_REQUIRE_GPU();
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  // bs=1 vs bs=128 at 4096 x 4096: the planted GEMM splits K at M <= 64 only, and cuBLASLt's
  // heuristic picked split-K at small M on the H200 (docs/gemm.md).
  db::Run run = gemmPairRun(dir, 4096, 4096, {1, 128}, 77, rng.seed());
  replay::ReplayOptions options;
  options.impls = {"gpu", "fp64"};
  auto p = replay::replayPair(run, {0, 0}, run, {0, 1}, options);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  std::printf("%s\n", replay::formatPair(*p).c_str());
  ASSERT_EQ(p->rows, (std::vector<std::pair<int64_t, int64_t>>{{0, 77}}));
  for (const auto& i : p->impls) {
    if (i.name == "wgmma" && !i.skipped.empty()) continue;
    ASSERT_TRUE(i.skipped.empty()) << i.name << ": " << i.skipped;
    if (i.name == "cublaslt-pinned" || i.name == "wgmma" || i.name == "mma-sync" ||
        i.name == "fp64") {
      EXPECT_TRUE(i.invariant()) << i.name;
    }
    if (i.name == "planted-splitk") {
      EXPECT_FALSE(i.invariant());
    }
  }
  EXPECT_EQ(p->a.reproducing().front(), "recorded");
  EXPECT_EQ(p->b.reproducing().front(), "recorded");
}

}  // namespace
}  // namespace detrace
