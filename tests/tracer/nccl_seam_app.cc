// A program that calls NCCL like a rank of a 4-rank job would (rank from argv[1]); linked against
// fake_nccl, it runs anywhere. The seam test records it with `detrace record`. Its calls go to a
// made-up stream handle, or to the default stream (0) where NCCL_SEAM_DEFAULT_STREAM=1.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

#if !defined(NCCL_REVOKE_DEFAULT)  // NCCL 2.28.9's, missing from 2.28.3's header
extern "C" ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
#endif

#define CHECK(call)                                              \
  do {                                                           \
    if ((call) != ncclSuccess) {                                 \
      std::fprintf(stderr, "nccl_seam_app: %s failed\n", #call); \
      return 1;                                                  \
    }                                                            \
  } while (0)

namespace {

// A non-blocking 4-rank communicator, ready (NCCL answers ncclInProgress, then makes it), or null.
ncclComm_t nonBlockingWorld(int rank) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return nullptr;
  ncclConfig_t nonblocking = NCCL_CONFIG_INITIALIZER;
  nonblocking.blocking = 0;
  ncclComm_t comm = nullptr;
  if (ncclCommInitRankConfig(&comm, 4, id, rank, &nonblocking) != ncclInProgress) return nullptr;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return nullptr;
  }
  return comm;
}

// NCCL_SEAM_AT_EXIT=1: an all-reduce of 37 from an atexit handler, after the main thread's
// thread_local destructors ran (exit() runs them first), as a library's exit code may make.
ncclComm_t g_exit_comm = nullptr;
void allReduceAtExit() {
  static char x[16], y[16];
  const ncclResult_t r = ncclAllReduce(x, y, 37, ncclFloat32, ncclSum, g_exit_comm,
                                       reinterpret_cast<cudaStream_t>(0x1234));
  std::printf("nccl_seam_app: all-reduce at exit: %d\n", static_cast<int>(r));
}

}  // namespace

int main(int argc, char** argv) {
  int rank = argc > 1 ? std::atoi(argv[1]) : 2;
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 4, id, rank));
  const char* default_stream = std::getenv("NCCL_SEAM_DEFAULT_STREAM");
  auto* stream = default_stream != nullptr && default_stream[0] == '1' ? nullptr
                                                                        : reinterpret_cast<cudaStream_t>(0x1234);
  char buf[64];
  // NCCL_SEAM_STALE_CHOICE=1 (recorded with --window ops:1:): an all-reduce of 4096 (Simple) left
  // out of the recording, then the first all-reduce, of 33 (LL), on a non-blocking communicator
  // with the same buffers, which answers ncclInProgress: it must get its own choice.
  if (const char* v = std::getenv("NCCL_SEAM_STALE_CHOICE"); v != nullptr && v[0] == '1') {
    static char x[16], y[16];
    CHECK(ncclAllReduce(x, y, 4096, ncclFloat32, ncclSum, comm, stream));
    ncclComm_t nb = nonBlockingWorld(rank);
    if (nb == nullptr) return 4;
    if (ncclAllReduce(x, y, 33, ncclFloat32, ncclSum, nb, stream) != ncclInProgress) return 6;
    ncclResult_t ready = ncclInProgress;
    while (ready == ncclInProgress) CHECK(ncclCommGetAsyncError(nb, &ready));
    CHECK(ncclCommDestroy(nb));
  }
  CHECK(ncclAllReduce(buf, buf + 8, 1024, ncclBfloat16, ncclSum, comm, stream));
  CHECK(ncclAllReduce(buf, buf + 8, 2048, ncclFloat32, ncclMax, comm, stream));
  CHECK(ncclGroupStart());
  CHECK(ncclSend(buf, 16, ncclFloat16, (rank + 1) % 4, comm, stream));
  CHECK(ncclRecv(buf + 16, 16, ncclFloat16, (rank + 3) % 4, comm, stream));
  CHECK(ncclGroupEnd());
  CHECK(ncclBroadcast(buf, buf, 7, ncclInt32, 0, comm, stream));
  // A group only simulated (NCCL 2.22): none of it runs, and the next call is not in a group.
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(buf, buf + 8, 4096, ncclFloat32, ncclSum, comm, stream));
  CHECK(ncclSend(buf, 16, ncclFloat16, (rank + 1) % 4, comm, stream));
  CHECK(ncclGroupSimulateEnd(&sim));
  CHECK(ncclAllReduce(buf, buf + 8, 5000, ncclFloat32, ncclSum, comm, stream));
  ncclComm_t half = nullptr;
  CHECK(ncclCommSplit(comm, rank / 2, rank, &half, nullptr));
  CHECK(ncclAllGather(buf, buf + 32, 5, ncclInt8, half, stream));
  CHECK(ncclCommDestroy(half));
  // The same world without rank 3 (NCCL 2.27's shrink), and a world made from two roots (2.23).
  ncclComm_t shrunk = nullptr;
  int excluded[] = {3};
  CHECK(ncclCommShrink(comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT));
  CHECK(ncclAllReduce(buf, buf + 8, 9, ncclFloat32, ncclSum, shrunk, stream));
  CHECK(ncclCommDestroy(shrunk));
  // A split inside a group: NCCL gives the handle at the group end.
  ncclComm_t grouped = nullptr;
  CHECK(ncclGroupStart());
  CHECK(ncclCommSplit(comm, 0, rank, &grouped, nullptr));
  if (grouped != nullptr) return 3;
  CHECK(ncclGroupEnd());
  CHECK(ncclAllReduce(buf, buf + 8, 13, ncclFloat32, ncclSum, grouped, stream));
  CHECK(ncclCommDestroy(grouped));
  // A split of a non-blocking communicator: NCCL gives the handle after the call returned.
  ncclComm_t nb_world = nonBlockingWorld(rank);
  if (nb_world == nullptr) return 4;
  ncclResult_t state = ncclInProgress;
  // Its first all-reduce connects peers: NCCL answers ncclInProgress and makes it on its own thread.
  if (ncclAllReduce(buf, buf + 8, 23, ncclFloat32, ncclSum, nb_world, stream) != ncclInProgress) return 6;
  state = ncclInProgress;
  while (state == ncclInProgress) CHECK(ncclCommGetAsyncError(nb_world, &state));
  CHECK(ncclAllReduce(buf, buf + 16, 25, ncclFloat32, ncclSum, nb_world, stream));
  ncclComm_t later = nullptr;
  CHECK(ncclCommSplit(nb_world, 0, rank, &later, nullptr));
  if (later != nullptr) return 4;
  while (later == nullptr) CHECK(ncclCommGetAsyncError(nb_world, &state));
  // A call that may answer ncclInProgress (a non-blocking communicator's), waited for as NCCL says.
  auto waited = [&](ncclResult_t r, ncclComm_t c) {
    ncclResult_t s = r;
    while (s == ncclInProgress) {
      if (ncclCommGetAsyncError(c, &s) != ncclSuccess) return ncclSystemError;
    }
    return s;
  };
  // NCCL_SEAM_SPLIT_CHILD=1: that split's communicator split again before any call on it, and an
  // all-reduce of 31 on the grandchild.
  if (const char* v = std::getenv("NCCL_SEAM_SPLIT_CHILD"); v != nullptr && v[0] == '1') {
    ncclComm_t grandchild = nullptr;
    CHECK(ncclCommSplit(later, 0, rank, &grandchild, nullptr));
    while (grandchild == nullptr) CHECK(ncclCommGetAsyncError(later, &state));
    CHECK(waited(ncclAllReduce(buf, buf + 8, 31, ncclFloat32, ncclSum, grandchild, stream), grandchild));
    CHECK(ncclCommDestroy(grandchild));
  }
  CHECK(waited(ncclAllReduce(buf, buf + 8, 15, ncclFloat32, ncclSum, later, stream), later));
  CHECK(ncclCommDestroy(later));
  // The same, but the handle leaves the slot NCCL wrote it to before its first use.
  ncclComm_t slot = nullptr;
  CHECK(ncclCommSplit(nb_world, 1, rank, &slot, nullptr));
  while (slot == nullptr) CHECK(ncclCommGetAsyncError(nb_world, &state));
  ncclComm_t moved = slot;
  slot = nullptr;
  CHECK(waited(ncclAllReduce(buf, buf + 8, 19, ncclFloat32, ncclSum, moved, stream), moved));
  CHECK(ncclAllReduce(buf, buf + 8, 21, ncclFloat32, ncclSum, moved, stream));
  CHECK(ncclCommDestroy(moved));
  // NCCL_SEAM_REVOKE=1: a split's first all-reduce, of 29, answers ncclInProgress (NCCL makes it
  // 20 ms later on its own thread), and the communicator is revoked before NCCL says it is ready.
  if (const char* v = std::getenv("NCCL_SEAM_REVOKE"); v != nullptr && v[0] == '1') {
    ncclComm_t doomed = nullptr;
    CHECK(ncclCommSplit(nb_world, 3, rank, &doomed, nullptr));
    while (doomed == nullptr) CHECK(ncclCommGetAsyncError(nb_world, &state));
    if (ncclAllReduce(buf, buf + 8, 29, ncclFloat32, ncclSum, doomed, stream) != ncclInProgress) return 7;
    CHECK(waited(ncclCommRevoke(doomed, 0), doomed));
    state = ncclInProgress;
    while (state == ncclInProgress) CHECK(ncclCommGetAsyncError(doomed, &state));
    CHECK(ncclCommDestroy(doomed));
  }
  // A group with a non-blocking communicator's first use: its end answers ncclInProgress, and NCCL
  // makes the whole group (an all-reduce, a send and a receive) on its own thread.
  ncclComm_t fresh = nullptr;
  CHECK(ncclCommSplit(nb_world, 2, rank, &fresh, nullptr));
  while (fresh == nullptr) CHECK(ncclCommGetAsyncError(nb_world, &state));
  CHECK(ncclGroupStart());
  CHECK(ncclAllReduce(buf, buf + 24, 27, ncclFloat32, ncclSum, fresh, stream));
  CHECK(ncclSend(buf + 32, 8, ncclFloat16, (rank + 1) % 2, fresh, stream));
  CHECK(ncclRecv(buf + 48, 8, ncclFloat16, (rank + 1) % 2, fresh, stream));
  CHECK(waited(ncclGroupEnd(), fresh));
  CHECK(ncclCommDestroy(fresh));
  CHECK(ncclCommDestroy(nb_world));
  ncclUniqueId roots[2];
  CHECK(ncclGetUniqueId(&roots[0]));
  CHECK(ncclGetUniqueId(&roots[1]));
  ncclComm_t scalable = nullptr;
  CHECK(ncclCommInitRankScalable(&scalable, 4, rank, 2, roots, nullptr));
  CHECK(ncclAllReduce(buf, buf + 8, 11, ncclFloat32, ncclSum, scalable, stream));
  CHECK(ncclCommDestroy(scalable));
  // A world made inside a group, as one thread makes several GPUs' communicators: NCCL makes it
  // at the group end, and only then knows its device.
  ncclUniqueId grouped_id;
  CHECK(ncclGetUniqueId(&grouped_id));
  ncclComm_t grouped_world = nullptr;
  CHECK(ncclGroupStart());
  CHECK(ncclCommInitRank(&grouped_world, 4, grouped_id, rank));
  CHECK(ncclGroupEnd());
  CHECK(ncclAllReduce(buf, buf + 8, 17, ncclFloat32, ncclSum, grouped_world, stream));
  CHECK(ncclCommDestroy(grouped_world));
  if (const char* v = std::getenv("NCCL_SEAM_AT_EXIT"); v != nullptr && v[0] == '1') {
    ncclUniqueId exit_id;
    CHECK(ncclGetUniqueId(&exit_id));
    CHECK(ncclCommInitRank(&g_exit_comm, 4, exit_id, rank));
    std::atexit(allReduceAtExit);
  }
  // NCCL_SEAM_GROUP_SWITCH=1 (as rank 2, device 2 current at first): a group of one all-reduce of
  // 43 on the default stream, made with the communicator's device current, ended with device 0
  // current (torch.cuda.nccl's groups set each device for its call and restore the first one).
  if (const char* v = std::getenv("NCCL_SEAM_GROUP_SWITCH"); v != nullptr && v[0] == '1') {
    CHECK(ncclGroupStart());
    CHECK(ncclAllReduce(buf, buf + 8, 43, ncclFloat32, ncclSum, comm, nullptr));
    setenv("FAKE_CUDA_CURRENT_DEVICE", "0", 1);  // the stand-in driver's current device
    CHECK(ncclGroupEnd());
    setenv("FAKE_CUDA_CURRENT_DEVICE", "2", 1);
  }
  // NCCL_SEAM_PIPELINE=1: the world as a pipeline of 4 stages (rank r receives 3 messages from
  // r - 1 and sends 3 to r + 1: the first and last stages make half as many calls as the others),
  // then an all-reduce of 41 on it, which every rank must number alike.
  if (const char* v = std::getenv("NCCL_SEAM_PIPELINE"); v != nullptr && v[0] == '1') {
    for (int m = 0; m < 3; ++m) {
      if (rank > 0) CHECK(ncclRecv(buf + 8 * m, 4, ncclFloat16, rank - 1, comm, stream));
      if (rank < 3) CHECK(ncclSend(buf + 8 * m + 32, 4, ncclFloat16, rank + 1, comm, stream));
    }
    CHECK(ncclAllReduce(buf, buf + 8, 41, ncclFloat32, ncclSum, comm, stream));
  }
  CHECK(ncclCommDestroy(comm));
  std::printf("nccl_seam_app: rank %d done\n", rank);
  return 0;
}
