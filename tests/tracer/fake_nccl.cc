// A stand-in libnccl for the LD_PRELOAD seam test (no GPU, no real NCCL): every call succeeds and
// does nothing; communicators are small heap objects that remember their rank and size.
//
// Like NCCL 2.28 it loads the profiler plugin named by NCCL_PROFILER_PLUGIN, looks up
// "ncclProfiler_v5", calls init per communicator and startEvent per collective (during the call)
// or point-to-point (at the outermost group end), with event descriptors laid out byte by byte as
// NCCL's plugin documentation gives them: type @0, parentObj @8, rank @16, then for a collective
// seqNumber @24, func @32, sendBuff @40, recvBuff @48, count @56, root @64, datatype @72,
// nChannels @80, nWarps @81, algo @88, proto @96; for a p2p func @24, buff @32, datatype @40,
// count @48, peer @56, nChannels @60. The fake picks the protocol by size: LL up to 1024
// elements, Simple above, and 2 channels (3 for p2p).
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <thread>
#include <vector>

namespace {

using InitFn = int (*)(void**, uint64_t, int*, const char*, int, int, int, void*);
using StartFn = int (*)(void*, void**, void*);
struct PluginV5 {
  const char* name;
  InitFn init;
  StartFn start_event;
  int (*stop_event)(void*);
  int (*record_event_state)(void*, int, void*);
  int (*finalize)(void*);
};

const PluginV5* plugin() {
  static const PluginV5* p = [] () -> const PluginV5* {
    const char* path = std::getenv("NCCL_PROFILER_PLUGIN");
    if (path == nullptr || *path == 0) return nullptr;
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return lib ? static_cast<const PluginV5*>(dlsym(lib, "ncclProfiler_v5")) : nullptr;
  }();
  return p;
}

template <typename T>
void put(unsigned char* d, size_t offset, T v) {
  std::memcpy(d + offset, &v, sizeof v);
}

}  // namespace

struct ncclComm {
  int rank;
  int nranks;
  void* profiler = nullptr;
  uint64_t coll_seq = 0;
  bool made = true;  // false while a group's end has yet to make it, as NCCL's init job
  bool blocking = true;  // its config's blocking (ncclCommInitRankConfig); splits inherit it
  bool connected = false;  // a non-blocking one's first all-reduce connects its peers, on a thread
  bool split = false;      // made by ncclCommSplit or ncclCommShrink
  std::vector<bool> user_ops;  // custom reduction operators ncclNumOps + i: whether i is in use
};

namespace {

ncclComm_t makeComm(int rank, int nranks) {
  auto* c = new ncclComm{rank, nranks};
  if (const PluginV5* p = plugin()) {
    int mask = 0;
    p->init(&c->profiler, 0xC0FFEEu + static_cast<uint64_t>(nranks), &mask, "fake", 1, nranks, rank,
            nullptr);
  }
  return c;
}

void profileColl(ncclComm_t comm, const char* func, size_t count, const char* datatype, int root,
                 const void* send = nullptr, const void* recv = nullptr) {
  const PluginV5* p = plugin();
  if (p == nullptr || comm->profiler == nullptr) return;
  unsigned char d[160] = {};
  put<uint64_t>(d, 0, 1u << 1);  // ncclProfileColl
  put<int>(d, 16, comm->rank);
  put<uint64_t>(d, 24, comm->coll_seq++);
  put<const char*>(d, 32, func);
  put<const void*>(d, 40, send);
  put<const void*>(d, 48, recv);
  put<size_t>(d, 56, count);
  put<int>(d, 64, root);
  put<const char*>(d, 72, datatype);
  put<uint8_t>(d, 80, 2);
  put<uint8_t>(d, 81, 16);
  put<const char*>(d, 88, "Ring");
  put<const char*>(d, 96, count <= 1024 ? "LL" : "Simple");
  void* handle = nullptr;
  p->start_event(comm->profiler, &handle, d);
}

struct PendingP2p {
  ncclComm_t comm;
  const char* func;
  size_t count;
  int peer;
  const void* buff;
};
thread_local int t_depth = 0;
thread_local std::vector<PendingP2p> t_p2p;
// Collectives inside the open group that NCCL makes on its own thread at the group end: the
// first use of a non-blocking communicator, which connects its peers.
struct PendingColl {
  ncclComm_t comm;
  size_t count;
  const void* send;
  const void* recv;
};
thread_local std::vector<PendingColl> t_async_colls;
// A blocking communicator's collectives inside a group: NCCL reports them at the outermost group
// end, in its plan's order (ncclPrepareTasks: sorted by size, then assembled per (func, op, type)
// size ascending), not in call order (FAKE_NCCL_PLAN_ORDER=1 makes the fake do so).
struct GroupedColl {
  ncclComm_t comm;
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  const void* send;
  const void* recv;
};
thread_local std::vector<GroupedColl> t_grouped;

// Like NCCL, a split or shrink gives its handle only when the new communicator is ready: at the
// call's return, at the outermost group end inside a group, or (a non-blocking parent: made with
// a config's blocking = 0; NCCL's group takes the parent's) later: here at the next
// ncclCommGetAsyncError. The new communicator takes the config given, else the parent's. A
// non-blocking parent's split answers ncclSuccess with the slot still null, as NCCL 2.28.3's did
// on an H100.
struct PendingHandle {
  ncclComm_t* slot;
  ncclComm_t comm;
};
thread_local std::vector<PendingHandle> t_handles;
thread_local std::vector<ncclComm_t> t_unmade;  // initialized inside the open group
std::vector<PendingHandle> g_async_handles;
// Calls the fake makes on threads of its own (never destroyed: a program that exits early leaves
// them joinable).
std::vector<std::thread>& g_async_work = *new std::vector<std::thread>;

ncclResult_t giveHandle(ncclComm_t parent, ncclComm_t* slot, ncclComm_t comm, const ncclConfig_t* config) {
  *slot = nullptr;
  if (comm != nullptr) {
    comm->blocking = config != nullptr ? config->blocking != 0 : parent->blocking;
    comm->split = true;
  }
  if (!parent->blocking) {
    g_async_handles.push_back({slot, comm});
    return ncclSuccess;
  }
  if (t_depth > 0) {
    t_handles.push_back({slot, comm});
  } else {
    *slot = comm;
  }
  return ncclSuccess;
}

void profileP2p(const PendingP2p& op) {
  const PluginV5* p = plugin();
  if (p == nullptr || op.comm->profiler == nullptr) return;
  unsigned char d[160] = {};
  put<uint64_t>(d, 0, 1u << 2);  // ncclProfileP2p
  put<int>(d, 16, op.comm->rank);
  put<const char*>(d, 24, op.func);
  put<const void*>(d, 32, op.buff);
  put<const char*>(d, 40, "ncclFloat16");
  put<size_t>(d, 48, op.count);
  put<int>(d, 56, op.peer);
  put<uint8_t>(d, 60, 3);
  void* handle = nullptr;
  p->start_event(op.comm->profiler, &handle, d);
}

}  // namespace

extern "C" {
ncclResult_t ncclGetVersion(int* version) { *version = 22803; return ncclSuccess; }
// Each call another id, the same on every rank that calls it as often (as if rank 0 made it and
// sent it to the others).
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static int calls = 0;
  std::memset(id->internal, 0x5a + calls++, sizeof id->internal);
  return ncclSuccess;
}
// Inside a group the communicator is made at the outermost group end, as NCCL makes it: until
// then it has no device (NCCL's reads as 0).
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  *comm = makeComm(rank, nranks);
  if (t_depth > 0) {
    (*comm)->made = false;
    t_unmade.push_back(*comm);
  }
  return ncclSuccess;
}
// A non-blocking one (config blocking = 0) answers ncclInProgress, its handle already given, as
// NCCL's; ncclCommGetAsyncError then says it is made.
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t* config) {
  *comm = makeComm(rank, nranks);
  (*comm)->blocking = config == nullptr || config->blocking != 0;
  return (*comm)->blocking ? ncclSuccess : ncclInProgress;
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int, ncclComm_t* newcomm, ncclConfig_t* config) {
  return giveHandle(comm, newcomm, color < 0 ? nullptr : makeComm(comm->rank % 2, 2), config);
}
// Several roots: the unique ids are not looked at, as in ncclCommInitRank above.
ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int, ncclUniqueId*, ncclConfig_t*) {
  *comm = makeComm(rank, nranks);
  return ncclSuccess;
}
// The remaining ranks keep their order: a rank moves down by the excluded ranks below it.
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excluded, int count, ncclComm_t* newcomm, ncclConfig_t* config, int) {
  if (excluded == nullptr || count <= 0) return ncclInvalidArgument;  // as NCCL 2.28
  int below = 0;
  for (int i = 0; i < count; ++i) {
    if (excluded[i] == comm->rank) return ncclInvalidArgument;  // an excluded rank does not call it
    if (excluded[i] < comm->rank) ++below;
  }
  return giveHandle(comm, newcomm, makeComm(comm->rank - below, comm->nranks - count), config);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* state) {
  for (std::thread& t : g_async_work) t.join();
  g_async_work.clear();
  for (const PendingHandle& h : g_async_handles) *h.slot = h.comm;
  g_async_handles.clear();
  *state = ncclSuccess;
  return ncclSuccess;
}
// NCCL 2.28's: the calls in flight stop (the fake's run on no GPU: nothing to stop), and
// ncclCommGetAsyncError says when the communicator is quiet.
ncclResult_t ncclCommRevoke(ncclComm_t, int flags) { return flags == 0 ? ncclSuccess : ncclInvalidArgument; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { delete comm; return ncclSuccess; }
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  *device = comm->made ? comm->rank : 0;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) { *rank = comm->rank; return ncclSuccess; }
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { *count = comm->nranks; return ncclSuccess; }
// A non-blocking communicator's first all-reduce connects its peers: like NCCL, the fake answers
// ncclInProgress and makes the call on a thread of its own, which reports it to the profiler;
// ncclCommGetAsyncError says when it is done. NCCL's thread may report before the call returns to
// the program or after: a world made by ncclCommInitRankConfig reports before (the fake waits for
// its thread), a split of it 20 ms after. Inside a group, the whole group is made so at its end.
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t, ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  const size_t custom = static_cast<size_t>(op) - ncclNumOps;
  if (op >= ncclNumOps && (custom >= comm->user_ops.size() || !comm->user_ops[custom])) return ncclInvalidArgument;
  if (!comm->blocking && !comm->connected && t_depth > 0) {
    t_async_colls.push_back({comm, count, send, recv});
    return ncclSuccess;
  }
  if (!comm->blocking && !comm->connected) {
    comm->connected = true;
    const bool early = !comm->split;
    g_async_work.emplace_back([=] {
      if (!early) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      profileColl(comm, "AllReduce", count, "ncclBfloat16", 0, send, recv);
    });
    if (early) {
      g_async_work.back().join();
      g_async_work.pop_back();
    }
    return ncclInProgress;
  }
  if (t_depth > 0 && std::getenv("FAKE_NCCL_PLAN_ORDER") != nullptr) {
    t_grouped.push_back({comm, "AllReduce", count, "ncclBfloat16", 0, send, recv});
    return ncclSuccess;
  }
  profileColl(comm, "AllReduce", count, "ncclBfloat16", 0, send, recv);
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t, ncclComm_t comm, cudaStream_t) {
  profileColl(comm, "AllGather", count, "ncclInt8", 0, send, recv);
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t, int root, ncclComm_t comm, cudaStream_t) {
  profileColl(comm, "Broadcast", count, "ncclInt32", root, send, recv);
  return ncclSuccess;
}
// NCCL 2.28's gather and scatter: NCCL makes them sends and receives (p2p profiler events).
ncclResult_t ncclGather(const void* send, void*, size_t count, ncclDataType_t, int root, ncclComm_t comm, cudaStream_t) {
  profileP2p({comm, "Send", count, root, send});
  return ncclSuccess;
}
ncclResult_t ncclScatter(const void*, void* recv, size_t count, ncclDataType_t, int root, ncclComm_t comm, cudaStream_t) {
  profileP2p({comm, "Recv", count, root, recv});
  return ncclSuccess;
}
ncclResult_t ncclSend(const void* buff, size_t count, ncclDataType_t, int peer, ncclComm_t comm, cudaStream_t) {
  PendingP2p op{comm, "Send", count, peer, buff};
  if (t_depth > 0) t_p2p.push_back(op); else profileP2p(op);
  return ncclSuccess;
}
ncclResult_t ncclRecv(void* buff, size_t count, ncclDataType_t, int peer, ncclComm_t comm, cudaStream_t) {
  PendingP2p op{comm, "Recv", count, peer, buff};
  if (t_depth > 0) t_p2p.push_back(op); else profileP2p(op);
  return ncclSuccess;
}
// Custom reduction operators, numbered per communicator from ncclNumOps up, the lowest free number
// first (NCCL too hands a destroyed operator's number out again, mixed with a hash of the
// communicator's address; the tracer keys operators by the value either way). The scalar is not
// looked at.
// pncclRedOpCreatePreMulSum, NCCL's profiling alias, is one the tracer does not wrap: an operator
// made unseen, as one made before the tracer loaded.
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t comm) {
  std::vector<bool>& ops = comm->user_ops;
  const size_t i = static_cast<size_t>(std::find(ops.begin(), ops.end(), false) - ops.begin());
  if (i == ops.size()) ops.push_back(true); else ops[i] = true;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + i);
  return ncclSuccess;
}
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  return pncclRedOpCreatePreMulSum(op, scalar, type, residence, comm);
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const size_t i = static_cast<size_t>(op) - ncclNumOps;
  if (op < ncclNumOps || i >= comm->user_ops.size() || !comm->user_ops[i]) return ncclInvalidArgument;
  comm->user_ops[i] = false;
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() { ++t_depth; return ncclSuccess; }
// A simulated group end: nothing of the group runs (its point-to-point calls are not reported).
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* sim) {
  const ncclSimInfo_t initialized = NCCL_SIM_INFO_INITIALIZER;
  if (sim == nullptr || sim->magic != initialized.magic) return ncclInvalidArgument;
  if (t_depth > 0 && --t_depth == 0) {
    t_p2p.clear();
    t_async_colls.clear();
    t_grouped.clear();
    // FAKE_NCCL_SIM_RUNS_JOBS=1: like NCCL's groupLaunch, the group's async jobs (inits, splits)
    // run even when the group is only simulated; only doLaunches is skipped.
    if (std::getenv("FAKE_NCCL_SIM_RUNS_JOBS") != nullptr) {
      for (const PendingHandle& h : t_handles) *h.slot = h.comm;
      for (ncclComm_t c : t_unmade) c->made = true;
    }
    t_handles.clear();
    t_unmade.clear();
  }
  sim->estimatedTime = 42.0f;
  return ncclSuccess;
}
// A group holding a non-blocking communicator's first use answers ncclInProgress, and the fake
// makes the whole group on a thread of its own, which reports it 20 ms later.
ncclResult_t ncclGroupEnd() {
  if (t_depth == 0 || --t_depth > 0) return ncclSuccess;
  for (const PendingHandle& h : t_handles) *h.slot = h.comm;
  t_handles.clear();
  for (ncclComm_t c : t_unmade) c->made = true;
  t_unmade.clear();
  if (!t_async_colls.empty()) {
    for (const PendingColl& c : t_async_colls) c.comm->connected = true;
    g_async_work.emplace_back([colls = std::move(t_async_colls), p2p = std::move(t_p2p)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (const PendingColl& c : colls) profileColl(c.comm, "AllReduce", c.count, "ncclFloat32", 0, c.send, c.recv);
      for (const PendingP2p& op : p2p) profileP2p(op);
    });
    t_async_colls.clear();
    t_p2p.clear();
    return ncclInProgress;
  }
  std::stable_sort(t_grouped.begin(), t_grouped.end(),
                   [](const GroupedColl& a, const GroupedColl& b) { return a.count < b.count; });
  for (const GroupedColl& c : t_grouped) profileColl(c.comm, c.func, c.count, c.datatype, c.root, c.send, c.recv);
  t_grouped.clear();
  for (const PendingP2p& op : t_p2p) profileP2p(op);
  t_p2p.clear();
  return ncclSuccess;
}
}
