// NCCL calls whose reports to the profiler plugin do not come in call order, for the seam tests
// (cpu_record_test.cc, RecordSeam.*Group*, *Gather*), linked against fake_nccl. `nccl_group_order_app
// RANK` (two ranks): two all-reduces of different sizes in one group (NCCL reports a group's
// collectives in its plan's order, size ascending, which FAKE_NCCL_PLAN_ORDER=1 makes the fake do);
// `RANK simsplit`: a split inside a group ended by ncclGroupSimulateEnd (NCCL still makes the
// communicator: FAKE_NCCL_SIM_RUNS_JOBS=1), then an all-reduce on it; `RANK gather`: an
// all-reduce, ncclGather, ncclScatter, an all-reduce; `RANK premulsum`: all-reduces with custom
// reduction operators (see premulsum below); `RANK unclosed` and `RANK late`: a group of 4196
// all-reduces, never ended or ended late (see longGroup below); `RANK manysizes`: a group of 300
// all-reduces and 200 sends and receives (see manySizes below).
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// Four all-reduces with PreMulSum operators, then one with ncclSum: one whose scalar (0.25f) NCCL
// reads on the host when it is made, one whose scalar is in device memory; once both are
// destroyed, a new one (2.0f) on the first's number, and one made through NCCL's profiling alias
// pncclRedOpCreatePreMulSum (unseen by the tracer, as one made before it loaded) on the second's.
int premulsum(ncclComm_t comm, cudaStream_t stream) {
  static char in[64], out[64];
  static float device_scalar;  // stands for device memory: the fake NCCL never reads it
  float quarter = 0.25f, two = 2.0f;
  const ncclScalarResidence_t host = ncclScalarHostImmediate;
  ncclRedOp_t host_op, device_op, again, unseen;
  if (ncclRedOpCreatePreMulSum(&host_op, &quarter, ncclFloat32, host, comm) != ncclSuccess) return 30;
  if (ncclRedOpCreatePreMulSum(&device_op, &device_scalar, ncclFloat32, ncclScalarDevice, comm) != ncclSuccess) {
    return 31;
  }
  if (host_op < ncclNumOps || device_op == host_op) return 32;
  if (ncclAllReduce(in, out, 8, ncclFloat32, host_op, comm, stream) != ncclSuccess) return 33;
  if (ncclAllReduce(in, out, 8, ncclFloat32, device_op, comm, stream) != ncclSuccess) return 34;
  if (ncclRedOpDestroy(host_op, comm) != ncclSuccess || ncclRedOpDestroy(device_op, comm) != ncclSuccess) return 35;
  if (ncclRedOpCreatePreMulSum(&again, &two, ncclFloat32, host, comm) != ncclSuccess) return 36;
  if (pncclRedOpCreatePreMulSum(&unseen, &two, ncclFloat32, host, comm) != ncclSuccess) return 37;
  if (again != host_op || unseen != device_op) return 38;  // the numbers were handed out again
  if (ncclAllReduce(in, out, 8, ncclFloat32, again, comm, stream) != ncclSuccess) return 39;
  if (ncclAllReduce(in, out, 8, ncclFloat32, unseen, comm, stream) != ncclSuccess) return 40;
  if (ncclAllReduce(in, out, 8, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 41;
  if (ncclRedOpDestroy(again, comm) != ncclSuccess || ncclRedOpDestroy(unseen, comm) != ncclSuccess) return 42;
  return 0;
}

// A group of 4096 + 100 all-reduces (more than the tracer holds for a group's end): never ended,
// the program exiting with it open (its bug), ended late, or only simulated
// (ncclGroupSimulateEnd), then one all-reduce more.
// A group of kManyColls all-reduces, each on buffers of its own, in descending count (NCCL reports
// them ascending: FAKE_NCCL_PLAN_ORDER=1), from kManyColls * 7 elements (Simple) down to 7 (LL),
// with a send and a receive of its own buffer after every third.
constexpr int kManyColls = 300;
int manySizes(ncclComm_t comm, cudaStream_t stream, int rank) {
  static char in[kManyColls], out[kManyColls], p2p[2 * kManyColls];
  if (ncclGroupStart() != ncclSuccess) return 60;
  for (int i = 0; i < kManyColls; ++i) {
    const size_t count = static_cast<size_t>(kManyColls - i) * 7;
    if (ncclAllReduce(in + i, out + i, count, ncclBfloat16, ncclSum, comm, stream) != ncclSuccess) return 61;
    if (i % 3 != 2) continue;
    if (ncclSend(p2p + 2 * i, 4, ncclFloat16, 1 - rank, comm, stream) != ncclSuccess) return 62;
    if (ncclRecv(p2p + 2 * i + 1, 4, ncclFloat16, 1 - rank, comm, stream) != ncclSuccess) return 63;
  }
  return ncclGroupEnd() != ncclSuccess ? 64 : 0;
}

int longGroup(ncclComm_t comm, cudaStream_t stream, bool end, bool simulate = false) {
  static char in[64], out[64];
  if (ncclGroupStart() != ncclSuccess) return 50;
  for (int i = 0; i < 4096 + 100; ++i) {
    if (ncclAllReduce(in, out, 8, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 51;
  }
  if (!end) return 0;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  if ((simulate ? ncclGroupSimulateEnd(&sim) : ncclGroupEnd()) != ncclSuccess) return 52;
  if (ncclAllReduce(in, out, 8, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 53;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = argc > 1 ? std::atoi(argv[1]) : 0;
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 1;
  auto* stream = reinterpret_cast<cudaStream_t>(0x1234);
  if (argc > 2 && std::string(argv[2]) == "simsplit") {
    // A split inside a group that is only simulated: NCCL still makes the communicator.
    ncclComm_t child = nullptr;
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    if (ncclGroupStart() != ncclSuccess) return 10;
    if (ncclCommSplit(comm, 0, rank, &child, nullptr) != ncclSuccess) return 11;
    if (ncclGroupSimulateEnd(&sim) != ncclSuccess) return 12;
    if (child == nullptr) return 13;
    static char in[64], out[64];
    if (ncclAllReduce(in, out, 8, ncclFloat32, ncclSum, child, stream) != ncclSuccess) return 14;
    ncclCommDestroy(child);
    ncclCommDestroy(comm);
    std::printf("nccl_group_order_app: rank %d simsplit done\n", rank);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "gather") {
    // NCCL 2.28's ncclGather and ncclScatter between two all-reduces.
    static char in[256], out[256];
    if (ncclAllReduce(in, out, 8, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 20;
    if (ncclGather(in, out, 8, ncclFloat32, 0, comm, stream) != ncclSuccess) return 21;
    if (ncclScatter(in, out, 8, ncclFloat32, 0, comm, stream) != ncclSuccess) return 22;
    if (ncclAllReduce(in, out, 8, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 23;
    ncclCommDestroy(comm);
    std::printf("nccl_group_order_app: rank %d gather done\n", rank);
    return 0;
  }
  const std::string mode = argc > 2 ? argv[2] : "";
  if (mode == "premulsum" || mode == "unclosed" || mode == "late" || mode == "simlong" || mode == "manysizes") {
    const int failed = mode == "premulsum"   ? premulsum(comm, stream)
                       : mode == "manysizes" ? manySizes(comm, stream, rank)
                                             : longGroup(comm, stream, mode != "unclosed", mode == "simlong");
    if (failed != 0) return failed;
    if (mode != "unclosed") ncclCommDestroy(comm);
    std::printf("nccl_group_order_app: rank %d %s done\n", rank, mode.c_str());
    return 0;
  }
  static char big_in[64], big_out[64], small_in[64], small_out[64];
  if (ncclGroupStart() != ncclSuccess) return 2;
  if (ncclAllReduce(big_in, big_out, 4096, ncclBfloat16, ncclSum, comm, stream) != ncclSuccess) return 3;
  if (ncclAllReduce(small_in, small_out, 16, ncclBfloat16, ncclSum, comm, stream) != ncclSuccess) return 4;
  if (ncclGroupEnd() != ncclSuccess) return 5;
  ncclCommDestroy(comm);
  std::printf("nccl_group_order_app: rank %d done\n", rank);
  return 0;
}
