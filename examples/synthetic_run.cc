// Writes a SYNTHETIC run (no GPU involved): two ranks of a toy tensor-parallel decoder, with kernel
// launches, cuBLASLt GEMMs, NCCL all-reduces and step markers, through the same TraceWriter the
// tracer uses. Rank 1 switches its all-reduce protocol at one step, as NCCL may when a message
// size crosses a threshold. It exists for the demo and the README; real runs come from
// `detrace record`. Usage: detrace-example-run OUT_DIR [--steps N]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "detrace/base/version.h"
#include "detrace/db/run.h"
#include "detrace/db/writer.h"

using namespace detrace;
using namespace detrace::db;

namespace {

struct Clock {
  int64_t ns = 1'764'400'000'000'000'000;
  int64_t advance(int64_t d) { return ns += d; }
};

Status writeRank(const std::string& path, int32_t rank, int32_t world, int steps) {
  WriterOptions options;
  options.overwrite = true;
  options.policy = OverflowPolicy::kBlock;
  DETRACE_ASSIGN_OR_RETURN(auto w, TraceWriter::create(path, options));
  w->setRank({rank, world, rank, rank, 4000 + rank, "example-host", "NVIDIA H200 (synthetic)", ""});
  w->setMeta("synthetic", "true");
  w->setMeta("driver_version", "580.159");
  w->setMeta("cuda_version", "13.0");
  w->setMeta("nccl_version", "2.28.3");
  w->setMeta("cublas_version", "13.0.0");
  int64_t stream = w->stream(0x5000 + rank, rank);
  int64_t norm = w->intern("void rmsnorm_kernel<__nv_bfloat16, 4096>(__nv_bfloat16*, const __nv_bfloat16*, float)");
  int64_t act = w->intern("void silu_and_mul_kernel<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int)");
  int64_t gemm_kernel = w->intern("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1");
  int64_t nccl_kernel = w->intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
  int64_t matmul = w->intern("cublasLtMatmul");
  int64_t allreduce = w->intern("ncclAllReduce");
  int64_t step_name = w->intern("decode step");
  Clock clock;
  int64_t corr = 1;
  auto kernel = [&](int64_t name, int64_t dur, int64_t parent, int32_t grid) {
    Event e;
    e.kind = EventKind::kKernel;
    e.name = name;
    e.stream = stream;
    e.device = rank;
    e.cpu_ns = clock.advance(2'000);
    e.gpu_start_ns = clock.ns + 6'000;
    e.gpu_end_ns = e.gpu_start_ns + dur;
    e.correlation_id = corr++;
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {grid, 1, 1};
    e.launch.block = {256, 1, 1};
    e.launch.smem_dynamic = 16384;
    e.launch.registers = 64;
    e.launch.api = LaunchApi::kRuntime;
    (void)w->append(e);
  };
  for (int step = 0; step < steps; ++step) {
    Event m;
    m.kind = EventKind::kMarker;
    m.name = step_name;
    m.cpu_ns = clock.advance(1'000);
    (void)w->appendMarker(m, Marker{MarkerKind::kStep, kUnset, step});
    for (int layer = 0; layer < 4; ++layer) {
      kernel(norm, 3'000, kUnset, 128);
      Event g;
      g.kind = EventKind::kGemm;
      g.name = matmul;
      g.stream = stream;
      g.cpu_ns = clock.advance(3'000);
      Gemm gemm;
      gemm.api = matmul;
      gemm.trans_a = 1;
      gemm.m = 8; gemm.n = 4096 / world; gemm.k = 4096;
      gemm.lda = 4096; gemm.ldb = 4096; gemm.ldc = gemm.n; gemm.ldd = gemm.n;
      gemm.a_dtype = gemm.b_dtype = gemm.c_dtype = gemm.d_dtype = DType::kBF16;
      gemm.compute_type = w->intern("CUBLAS_COMPUTE_32F");
      gemm.algo_id = 66; gemm.tile = 27; gemm.split_k = 1; gemm.stages = 20;
      gemm.algo_source = 2;
      auto gseq = w->appendGemm(g, gemm);
      kernel(gemm_kernel, 12'000, gseq.value_or(kUnset), 132);
      kernel(act, 2'500, kUnset, 64);
      Event c;
      c.kind = EventKind::kCollective;
      c.name = allreduce;
      c.stream = stream;
      c.cpu_ns = clock.advance(2'000);
      Collective coll;
      coll.op = CollOp::kAllReduce;
      coll.dtype = DType::kBF16;
      coll.count = 8 * 4096;
      coll.redop = RedOp::kSum;
      coll.comm_id = 0x5eed;
      coll.comm_rank = rank;
      coll.comm_nranks = world;
      coll.comm_seq = step * 4 + layer;
      coll.algo = w->intern("Ring");
      // The planted difference: from step 3 on, rank 1 reports LL128 instead of LL.
      coll.proto = w->intern(rank == 1 && step >= 3 ? "LL128" : "LL");
      coll.channels = 2;
      auto cseq = w->appendCollective(c, coll);
      kernel(nccl_kernel, 9'000, cseq.value_or(kUnset), 2);
    }
  }
  return w->close();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(stderr,
                 "usage: detrace-example-run OUT_DIR [--steps N]\n"
                 "Writes a small synthetic two-rank run (no GPU needed) to OUT_DIR.\n");
    return argc < 2 ? 2 : 0;
  }
  std::string dir = argv[1];
  int steps = 8;
  if (argc >= 4 && std::string(argv[2]) == "--steps") steps = std::max(1, std::atoi(argv[3]));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "detrace-example-run: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    return 2;
  }
  RunManifest m;
  m.tool_version = kToolVersion;
  m.command = {"detrace-example-run", dir};
  m.host = "example-host";
  m.start_time_ns = 1'764'400'000'000'000'000;
  m.end_time_ns = m.start_time_ns + 1'000'000'000;
  m.exit_code = 0;
  m.options = {{"synthetic", "true"}};
  for (int32_t rank = 0; rank < 2; ++rank) {
    Status st = writeRank(fmt::format("{}/proc-{}.dtrace", dir, 4000 + rank), rank, 2, steps);
    if (!st.isOk()) {
      std::fprintf(stderr, "detrace-example-run: %s\n", st.message().c_str());
      return 2;
    }
  }
  Status st = writeManifest(dir, m);
  if (!st.isOk()) {
    std::fprintf(stderr, "detrace-example-run: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("wrote a synthetic 2-rank run to %s\n", dir.c_str());
  return 0;
}
