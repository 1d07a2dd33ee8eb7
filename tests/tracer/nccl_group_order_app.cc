// NCCL calls whose reports to the profiler plugin do not come in call order, for the seam tests
// (cpu_record_test.cc, RecordSeam.*Group*, *Gather*), linked against fake_nccl. `nccl_group_order_app
// RANK` (two ranks): two all-reduces of different sizes in one group (NCCL reports a group's
// collectives in its plan's order, size ascending, which FAKE_NCCL_PLAN_ORDER=1 makes the fake do);
// `RANK simsplit`: a split inside a group ended by ncclGroupSimulateEnd (NCCL still makes the
// communicator: FAKE_NCCL_SIM_RUNS_JOBS=1), then an all-reduce on it; `RANK gather`: an
// all-reduce, ncclGather, ncclScatter, an all-reduce.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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
  static char big_in[64], big_out[64], small_in[64], small_out[64];
  if (ncclGroupStart() != ncclSuccess) return 2;
  if (ncclAllReduce(big_in, big_out, 4096, ncclBfloat16, ncclSum, comm, stream) != ncclSuccess) return 3;
  if (ncclAllReduce(small_in, small_out, 16, ncclBfloat16, ncclSum, comm, stream) != ncclSuccess) return 4;
  if (ncclGroupEnd() != ncclSuccess) return 5;
  ncclCommDestroy(comm);
  std::printf("nccl_group_order_app: rank %d done\n", rank);
  return 0;
}
