// The ncclProfiler_v5 symbol. The declarations below are written from NCCL's public plugin
// documentation (ext-profiler/README.md and the v5 descriptor it documents); only the members
// detrace reads are declared, at the offsets NCCL 2.28 uses, checked by the static_asserts.
#include "nccl_profiler_plugin.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace {

using NcclResult = int;  // ncclResult_t; ncclSuccess == 0
constexpr NcclResult kNcclSuccess = 0;

// Event type bits (ncclProfileColl, ncclProfileP2p).
constexpr uint64_t kProfileColl = 1u << 1;
constexpr uint64_t kProfileP2p = 1u << 2;

struct CollDescr {
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t n_channels;
  uint8_t n_warps;
  const char* algo;
  const char* proto;
  void* parent_group;
};

struct P2pDescr {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t n_channels;
  void* parent_group;
};

struct EventDescrV5 {
  uint64_t type;
  void* parent_obj;
  int rank;
  union {
    CollDescr coll;
    P2pDescr p2p;
  };
};
static_assert(offsetof(EventDescrV5, coll) == 24);
static_assert(offsetof(EventDescrV5, coll) + offsetof(CollDescr, algo) == 88);
static_assert(offsetof(EventDescrV5, coll) + offsetof(CollDescr, n_channels) == 80);
static_assert(offsetof(EventDescrV5, p2p) + offsetof(P2pDescr, peer) == 56);

struct CommContext {
  uint64_t comm_id;
  int rank;
  int nranks;
};

std::atomic<detrace::tracer::NcclChoiceSink> g_choice_sink{nullptr};
std::atomic<detrace::tracer::NcclCommSink> g_comm_sink{nullptr};
std::atomic<int64_t> g_inits{0};

NcclResult pluginInit(void** context, uint64_t comm_id, int* activation_mask, const char* /*name*/,
                      int /*n_nodes*/, int nranks, int rank, void* /*logfn*/) {
  g_inits.fetch_add(1, std::memory_order_relaxed);
  // new(nothrow): an allocation failure leaves this communicator's events unreported (a null
  // context: pluginStartEvent ignores them), nothing else. The mask is NCCL's, for every
  // communicator of the process: always the same.
  auto* ctx = new (std::nothrow) CommContext{comm_id, rank, nranks};
  *context = ctx;
  *activation_mask = static_cast<int>(kProfileColl | kProfileP2p);
  if (auto sink = g_comm_sink.load(std::memory_order_acquire); sink && ctx) sink(comm_id, rank, nranks);
  return kNcclSuccess;
}

NcclResult pluginStartEvent(void* context, void** handle, EventDescrV5* d) {
  if (handle) *handle = nullptr;  // no per-event state: NCCL's stop/record calls carry nothing we need
  auto sink = g_choice_sink.load(std::memory_order_acquire);
  const auto* ctx = static_cast<const CommContext*>(context);
  if (sink == nullptr || ctx == nullptr || d == nullptr) return kNcclSuccess;
  detrace::tracer::NcclChoice c;
  c.comm_id = ctx->comm_id;
  c.rank = ctx->rank;
  c.nranks = ctx->nranks;
  auto text = [](const char* s) { return s ? s : ""; };
  if (d->type == kProfileColl) {
    c.seq = d->coll.seq_number;
    c.func = text(d->coll.func);
    c.datatype = text(d->coll.datatype);
    c.algo = text(d->coll.algo);
    c.proto = text(d->coll.proto);
    c.count = d->coll.count;
    c.root_or_peer = d->coll.root;
    c.channels = d->coll.n_channels;
    c.warps = d->coll.n_warps;
    c.send = d->coll.send_buff;
    c.recv = d->coll.recv_buff;
  } else if (d->type == kProfileP2p) {
    c.p2p = true;
    c.func = text(d->p2p.func);
    c.datatype = text(d->p2p.datatype);
    c.count = d->p2p.count;
    c.root_or_peer = d->p2p.peer;
    c.channels = d->p2p.n_channels;
    c.recv = d->p2p.buff;
  } else {
    return kNcclSuccess;
  }
  sink(c);
  return kNcclSuccess;
}

NcclResult pluginStopEvent(void*) { return kNcclSuccess; }
NcclResult pluginRecordEventState(void*, int, void*) { return kNcclSuccess; }
NcclResult pluginFinalize(void* context) {
  delete static_cast<CommContext*>(context);
  return kNcclSuccess;
}

}  // namespace

namespace detrace::tracer {
void setNcclChoiceSink(NcclChoiceSink sink) { g_choice_sink.store(sink, std::memory_order_release); }
void setNcclCommSink(NcclCommSink sink) { g_comm_sink.store(sink, std::memory_order_release); }
int64_t ncclProfilerInits() noexcept { return g_inits.load(std::memory_order_relaxed); }
}  // namespace detrace::tracer

// The table NCCL looks up by name (dlsym "ncclProfiler_v5"). Function pointer types match NCCL's
// v5 signatures (ncclResult_t is an int-sized enum; the logger and state arguments are passed
// through untouched).
struct NcclProfilerV5 {
  const char* name;
  NcclResult (*init)(void**, uint64_t, int*, const char*, int, int, int, void*);
  NcclResult (*start_event)(void*, void**, EventDescrV5*);
  NcclResult (*stop_event)(void*);
  NcclResult (*record_event_state)(void*, int, void*);
  NcclResult (*finalize)(void*);
};

extern "C" __attribute__((visibility("default"))) const NcclProfilerV5 ncclProfiler_v5 = {
    "detrace", pluginInit, pluginStartEvent, pluginStopEvent, pluginRecordEventState, pluginFinalize};
