// The CUPTI adapter: the only part of the tracer that talks to CUPTI, and the only part that
// needs a GPU to run. It decodes CUPTI callbacks and activity records into the plain structs of
// reorder_buffer.h and feeds them to the session's ReorderBuffer; the ordering logic lives there.
//
// Callbacks (on the engine's launching threads) must be cheap and must never throw: they read the
// CUPTI timestamp and the API's parameters, take a slot, and return. A driver launch made inside a
// runtime launch (cudaLaunchKernel calls cuLaunchKernel) is folded into the runtime slot as an
// alias correlation id, so whichever id the activity record carries finds the slot.
//
// Activity records come in buffers from a pool allocated at start (kPoolBuffers x bufferBytes()).
// When the pool is empty the request is refused and CUPTI drops records (counted). Rejecting
// buffers can crash CUPTI before API version 27 (CUDA 12.9), so older CUPTIs get a fresh buffer.
// Periodic flush (cuptiActivityFlushPeriod) only returns full buffers, so a flusher thread calls
// cuptiActivityFlushAll every kFlushPeriod and then times out stale slots.
#include <cuda.h>
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "control.h"
#include "detrace/tracer/lasting_thread_local.h"
#include "commit_thread.h"
#include "cupti_api.h"
#include "deep.h"
#include "diag_timing.h"
#include "env_setting.h"
#include "launch_callback_ids.h"
#include "library_ops.h"
#include "log.h"
#include "fingerprinter.h"
#include "next_symbol.h"
#include "own_stream.h"
#include "nvtx_markers.h"
#include "placement.h"
#include "detrace/tracer/callback_repeats.h"
#include "detrace/tracer/correlation_ids.h"
#include "detrace/tracer/cupti_decode.h"
#include "detrace/tracer/flush_settle.h"
#include "detrace/tracer/graph_record_counts.h"
#include "detrace/tracer/launch_nesting.h"
#include "detrace/tracer/name_cache.h"
#include "self_launch.h"
#include "session.h"
#include "signals.h"
#include "writer_ids.h"


namespace detrace::tracer {
namespace {

constexpr size_t kPoolBuffers = 16;
constexpr auto kFlushPeriod = std::chrono::milliseconds(100);
constexpr uint64_t kPublishEvery = 10;  // flusher rounds between publications of the counters
constexpr size_t kMaxGraphs = 1 << 14;

CuptiApi& g_cupti = *new CuptiApi;  // leaked: callbacks and the late finish may use it during static teardown
CUpti_SubscriberHandle g_subscriber = nullptr;
std::atomic<bool> g_active{false};

// ---- activity buffer pool ----
// Buffers are handed to CUPTI already zero (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER) and
// cleared again by the thread that gets them back (CUPTI's, or the flusher's), off the program's
// path; otherwise CUPTI clears them on the launching thread. With kernel records alone that cost a
// C++ launch loop +28.6% against +2.5% zeroed in one call (H200, 2026-12-01; +29.4% against +1.7%
// in another, +42.2% against +40.0% in a third), and CUPTI's header says clearing stalls the
// launching thread. Whole `meta` loops cannot tell the two apart on these machines: against
// DETRACE_ZEROED_BUFFERS=0 (CUPTI clears them) zeroed was ahead in 3 same-call pairs and behind in
// 3, within a process-to-process spread of 30-40% (docs/overhead.md). The teardown losses once
// blamed on zeroed buffers come as often without them (see forcedFlush).
std::mutex g_pool_mu;
// Never destroyed (like the session): a finish that outlives the exit's bound (finishBounded)
// may still use it while the program's static destructors run.
std::vector<uint8_t*>& g_pool = *new std::vector<uint8_t*>();
bool g_may_reject = true;
bool g_zeroed_buffers = false;
std::atomic<int64_t> g_buffers_refused{0};
// API callbacks CUPTI delivered twice in a row, ignored (callback_repeats.h).
thread_local CallbackRepeats t_repeats;
std::atomic<int64_t> g_callbacks_repeated{0};

// The size of each activity buffer: 1 MiB, or DETRACE_CUPTI_BUFFER_MIB (1 to 64, read once). A
// benchmark knob: CUPTI's records alone cost the eager loops 0.3-0.7 points less with 8 MiB
// buffers than with 1 MiB ones (H100), but detrace's `meta` showed no gain in two orders (H200;
// docs/overhead.md, 2026-12-06), so the default stays small.
size_t bufferBytes() {
  static const size_t bytes = [] {
    return static_cast<size_t>(envNumber("DETRACE_CUPTI_BUFFER_MIB", 1, 1, 64)) << 20;
  }();
  return bytes;
}

// A forced flush does not see the records that a flush on another thread (the flusher's, CUPTI's
// own) already took. So the flusher's flushes and the one at context teardown take turns
// (g_flush_call_mu; the teardown waits for it at most kMaxWaitMs, in case the flusher's flush is
// itself waiting for the driver the teardown holds), and a commit waits for the bufferCompleted
// calls under way on any thread (awaitBuffersInHand, bounded likewise).
constexpr int kMaxWaitMs = 200;
std::timed_mutex g_flush_call_mu;
std::atomic<int> g_buffers_in_hand{0};

// Teardown diagnostics (DETRACE_DIAG_TEARDOWN=1, read once; scripts/device-teardown): one stderr
// line per activity record and buffer, per periodic flush and per step of a forced flush.
const bool g_diag_teardown = [] {
  const char* v = std::getenv("DETRACE_DIAG_TEARDOWN");
  return v != nullptr && std::strcmp(v, "1") == 0;
}();
std::atomic<int64_t> g_records_read{0};  // counted only with DETRACE_DIAG_TEARDOWN=1
std::atomic<int64_t> g_buffers_read{0};
std::atomic<bool> g_torn_down{false};  // a context-teardown commit has run (diagnostics only)
const auto g_diag_t0 = std::chrono::steady_clock::now();

double diagMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g_diag_t0).count();
}

void diagTeardown(const char* step) {
  if (!g_diag_teardown) return;
  logLine("teardown: %.3f ms: %s: %lld records in %lld buffers so far, %lld buffers refused", diagMs(), step,
          static_cast<long long>(g_records_read.load()), static_cast<long long>(g_buffers_read.load()),
          static_cast<long long>(g_buffers_refused.load()));
}

// ---- forced flushes ----
// A forced flush made too soon loses records for good: AttachGpu.ContextTeardownCommits (4
// kernels, cudaDeviceReset about 1 ms after its context came up) lost all 4 in 42 of 140 runs
// with the flush made at once (with and without zeroed buffers alike), when it came 112-125 ms
// after the records were turned on; runs whose teardown came later, and all 100 runs where the
// flush first waited 10-50 ms, kept them; a second flush 10 or 50 ms after the first did not bring
// them back (16 of 40 failed; H200, CUDA 13.0, 2026-12-01). The kernels' age and the context's
// were the same in passing and failing runs. CUPTI's reason is not known, so every forced flush
// first waits as flush_settle.h says: only programs that stop recording that soon pay it.
std::atomic<int64_t> g_records_on_ns{0};  // steadyNs() when the activity records were last turned on

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::chrono::nanoseconds settleWait() {
  return std::chrono::nanoseconds(forcedFlushWaitNs(steadyNs(), g_records_on_ns.load(std::memory_order_relaxed)));
}

void forcedFlush() {
  if (auto wait = settleWait(); wait.count() > 0) {
    if (g_diag_teardown) logLine("teardown: %.3f ms: waiting %.3f ms before the forced flush", diagMs(), wait.count() / 1e6);
    std::this_thread::sleep_for(wait);  // resumed after a signal: libstdc++ sleeps the rest
  }
  CUptiResult r = g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (g_diag_teardown) logLine("teardown: %.3f ms: forced flush returned %d", diagMs(), static_cast<int>(r));
}

void awaitBuffersInHand() {
  for (int i = 0; i < kMaxWaitMs && g_buffers_in_hand.load(std::memory_order_acquire) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Zeroed only when CUPTI was told it gets zeroed buffers: a buffer allocated when the pool is
// empty is allocated on the launching thread.
uint8_t* newBuffer() {
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(8, bufferBytes()));
  if (b != nullptr && g_zeroed_buffers) std::memset(b, 0, bufferBytes());
  return b;
}

// ---- flusher thread ----
// Never destroyed either: where Session::finish() never stops the flusher (a process paused and
// never started), it is still waiting on them while the program's static destructors run.
std::mutex& g_flush_mu = *new std::mutex;
std::condition_variable& g_flush_cv = *new std::condition_variable;
bool g_flush_stop = false;
// On the heap, never destroyed: a process that exits without Session::finish() (paused and never
// started, or recording failed) must not meet a joinable std::thread's destructor (std::terminate).
std::thread* g_flusher = nullptr;

// ---- caches (bounded) ----
std::mutex g_cache_mu;
// Never destroyed, as g_pool.
std::unordered_map<uint32_t, int32_t>& g_context_device =
    *new std::unordered_map<uint32_t, int32_t>();  // context uid -> device
// Each executable graph's records per launch (countGraphRecords, then its nodes' enabling).
GraphRecordCounts& g_graph_records = *new GraphRecordCounts(kMaxGraphs);
// The process's contexts (from their creation to their teardown): an exit or signal finished
// from a thread with no current context still waits for their work (awaitContextWork).
std::vector<CUcontext>& g_contexts = *new std::vector<CUcontext>();
constexpr size_t kMaxContexts = 1024;

// ---- per-thread launch state ----
// Which launch a callback belongs to (launch_nesting.h), and the graph launch opened for the
// fingerprinter (beginReplay or orderUnrecordedLaunch) that an exit closes (endReplay).
thread_local LaunchNesting t_nesting;
// Bumped at every capture start: a launch whose API exit was never seen (capture stopped in the
// middle of it) must not leave its thread's nesting state behind for the next capture.
std::atomic<uint64_t> g_capture_epoch{0};
thread_local uint64_t t_capture_epoch = 0;
// A plain launch between its API enter and exit (the fast path: no graph, no deep window). Its
// slot is published at the exit with the nested driver call's correlation id and the outcome, so
// the launching thread takes no lock (ReorderBuffer::addLaunchAtExit).
struct InFlightLaunch {
  bool active = false;
  bool runtime = false;
  uint32_t generation = 0;          // ReorderBuffer::launchEntering's
  ReorderBuffer* buffer = nullptr;  // the buffer it entered (a stop in between does not lose it)
  bool captured = false;  // a graph node was created inside it: captured into a graph, not run
  uint64_t parent = 0;
  uint64_t alias = 0;
  ApiLaunch launch;
};
InFlightLaunch& inFlight() {
  struct Tag;
  return lastingThreadLocal<InFlightLaunch, Tag>();
}

int64_t cuptiNow() {
  uint64_t t = 0;
  return g_cupti.timestamp && g_cupti.timestamp(&t) == CUPTI_SUCCESS ? static_cast<int64_t>(t) : 0;
}

// ---- placement by correlation id (placement.h) ----
std::atomic<bool> g_placement{false};
thread_local uint64_t t_marker_correlation = 0;  // set by the marker's API-enter callback

// ---- CUPTI's ids of the streams library calls name (opStreamId) ----
// Bumped when a stream is destroyed: its handle may then name another stream, so every thread's
// cache starts again.
std::atomic<uint64_t> g_stream_epoch{0};
// Bumped when a context is destroyed (currentDeviceId's cache).
std::atomic<uint64_t> g_context_epoch{0};

CUcontext currentContext() {
  using CtxGetFn = CUresult (*)(CUcontext*);
  static const auto get = reinterpret_cast<CtxGetFn>(loadedSymbol("cuCtxGetCurrent", "libcuda.so"));
  CUcontext ctx = nullptr;
  if (get == nullptr || get(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  return ctx;
}

// CUPTI's device id of the current context, cached per thread by context (asking CUPTI every
// library call cost a few hundred ns of a GEMM's record on the H200). False without a context.
bool currentDeviceId(uint32_t& dev) {
  thread_local CUcontext t_ctx = nullptr;
  thread_local uint32_t t_dev = 0;
  thread_local uint64_t t_epoch = ~uint64_t{0};
  const CUcontext ctx = currentContext();
  if (ctx == nullptr || g_cupti.device_id == nullptr) return false;
  const uint64_t epoch = g_context_epoch.load(std::memory_order_acquire);
  if (ctx != t_ctx || epoch != t_epoch) {
    if (g_cupti.device_id(ctx, &t_dev) != CUPTI_SUCCESS) return false;
    t_ctx = ctx;
    t_epoch = epoch;
  }
  dev = t_dev;
  return true;
}

struct CuptiStreamCache {
  struct Entry {
    int64_t handle = 0;
    int32_t device = -1;
    uint32_t id = 0;
    bool used = false;
    bool known = false;  // false: CUPTI could not say (asked once)
  };
  std::array<Entry, 8> entries{};
  unsigned next = 0;
  uint64_t epoch = 0;
};
thread_local CuptiStreamCache t_cupti_streams;

// CUPTI's id of the stream `handle` names (on `device`: the pseudo-handles name the current
// context's default streams, and a process has one context per device in practice), as the
// records of its kernels carry it; false if CUPTI cannot say.
bool cuptiStreamId(int64_t handle, int32_t device, uint32_t& id) {
  CuptiStreamCache& c = t_cupti_streams;
  const uint64_t epoch = g_stream_epoch.load(std::memory_order_acquire);
  if (c.epoch != epoch) {
    c = {};
    c.epoch = epoch;
  }
  for (const CuptiStreamCache::Entry& e : c.entries) {
    if (e.used && e.handle == handle && e.device == device) {
      id = e.id;
      return e.known;
    }
  }
  if (g_cupti.stream_id == nullptr) return false;
  const bool per_thread = handle == reinterpret_cast<int64_t>(CU_STREAM_PER_THREAD);
  const bool pseudo = per_thread || handle == reinterpret_cast<int64_t>(CU_STREAM_LEGACY) || handle == 0;
  // A default stream is the current context's: CUPTI needs that context to say which.
  const CUcontext ctx = pseudo ? currentContext() : nullptr;
  const CUstream stream = pseudo ? nullptr : reinterpret_cast<CUstream>(handle);
  const bool known = (!pseudo || ctx != nullptr) &&
                     g_cupti.stream_id(ctx, stream, per_thread ? 1 : 0, &id) == CUPTI_SUCCESS;
  c.entries[c.next++ % c.entries.size()] = {handle, device, id, true, known};
  return known;
}
constexpr CUpti_CallbackId kMarkerCallback = CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion;

#define DETRACE_CUPTI_CALL(call, what)                                                     \
  do {                                                                                     \
    CUptiResult r_ = (call);                                                               \
    if (r_ != CUPTI_SUCCESS) {                                                             \
      logLine("%s failed: %s (%s)", #call, g_cupti.errorText(r_), what);                   \
      return false;                                                                        \
    }                                                                                      \
  } while (0)

int32_t deviceOfLocked(CUcontext ctx, uint32_t context_uid);

int32_t deviceOf(CUcontext ctx, uint32_t context_uid) {
  // A thread launches into one context almost always: remember its last answer without a lock.
  thread_local uint32_t t_uid = 0;
  thread_local int32_t t_device = -1;
  if (context_uid != 0 && context_uid == t_uid) return t_device;
  int32_t device = deviceOfLocked(ctx, context_uid);
  if (device >= 0) {
    t_uid = context_uid;
    t_device = device;
  }
  return device;
}

int32_t deviceOfLocked(CUcontext ctx, uint32_t context_uid) {
  {
    std::lock_guard lk(g_cache_mu);
    if (auto it = g_context_device.find(context_uid); it != g_context_device.end()) return it->second;
  }
  uint32_t dev = 0;
  int32_t device = ctx && g_cupti.device_id(ctx, &dev) == CUPTI_SUCCESS ? static_cast<int32_t>(dev) : -1;
  std::lock_guard lk(g_cache_mu);
  if (g_context_device.size() < 1024) g_context_device[context_uid] = device;
  return device;
}

// kRecordsUnknown for a graph not counted (the table was full); kRecordsVary for one whose count
// changes from launch to launch.
int32_t expectedGraphRecords(uint64_t exec) { return g_graph_records.expected(exec); }

// True if `stream` is being captured into a CUDA graph (launches on it do not run now).
bool isCapturing(int64_t stream) {
  using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  static auto fn = reinterpret_cast<IsCapturingFn>(loadedSymbol("cuStreamIsCapturing", "libcuda.so"));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return fn != nullptr && fn(reinterpret_cast<CUstream>(stream), &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// A graph launch that gets no results (paused, outside --window, or its graph gets none): its
// captured digests still read their cells, so it is ordered like the others, and its end marked
// at its exit (endReplay).
void orderUnrecordedGraphLaunch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params,
                                bool runtime) {
  if (!Fingerprinter::ordersGraphLaunches()) return;
  const LaunchTarget target = launchTarget(domain, cbid, params);
  const CUstream stream = launchStream(domain, cbid, target.stream);
  if (target.graph_exec == 0 || isCapturing(reinterpret_cast<int64_t>(stream))) return;
  if (Fingerprinter::get().orderUnrecordedLaunch(target.graph_exec, stream)) t_nesting.openGraph(runtime);
}

// The driver half of a runtime launch (cudaLaunchKernel calls cuLaunchKernel): the same launch,
// another correlation id, kept as the runtime slot's alias. Its records carry that id, so the
// alias is added even when a stop came since the runtime enter took the slot (startedBuffer, not
// buffer(), which is null once capturing stops): without it the slot never gets its records and
// holds the stop's wait (Session::stopCapture) for its whole 2 s, as the fast path's
// in-flight launch's buffer already avoids for plain launches.
void onDriverHalfEnter(CUpti_CallbackId cbid, const CUpti_CallbackData* cb, Session& s) {
  const uint64_t runtime_token = t_nesting.runtimeToken();
  if (InFlightLaunch& f = inFlight(); f.active && f.runtime) {
    if (f.alias == 0) f.alias = unwrapCorrelation(cb->correlationId);
  } else if (ReorderBuffer* b = s.startedBuffer(); b && runtime_token != 0) {
    b->addAlias(runtime_token, unwrapCorrelation(cb->correlationId));
  }
  deep::driverEnter(cbid, cb->functionParams, runtime_token);  // its CUfunction and parameters
}

// A launch's API enter: the slot of a recorded launch (taken now, or at the exit on the fast path),
// or the ordering of a graph launch that is not recorded.
void onLaunchEnter(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb,
                   const LaunchKind& kind, bool runtime, Session& s) {
  ReorderBuffer* buffer = s.buffer();
  db::TraceWriter* w = s.writer();
  if (buffer == nullptr || w == nullptr) {
    // Paused (only graph launches come then, see setLaunchCallbacks): ordered all the same.
    if (kind.graph) orderUnrecordedGraphLaunch(domain, cbid, cb->functionParams, runtime);
    if (kind.graph) t_nesting.enter(runtime, 0, kind.graph);
    return;
  }
  WindowGate::LaunchTicket deep_ticket;
  bool deep = false;
  if (WindowGate* deep_gate = s.deepGate()) {
    deep_ticket = deep_gate->admitLaunchTicket(cb->symbolName);
    // Before the returns below: a look-back window opening at a launch that is captured, outside
    // --window or a graph launch still decides what it keeps.
    deep::noteTicket(deep_ticket);
    deep = deep_ticket.record && !kind.graph;
  }
  if (!s.gate().admitLaunch(cb->symbolName)) {  // outside the recording window
    if (kind.graph) orderUnrecordedGraphLaunch(domain, cbid, cb->functionParams, runtime);
    t_nesting.enter(runtime, 0, kind.graph);
    return;
  }
  ApiLaunch launch;
  launch.correlation_id = unwrapCorrelation(cb->correlationId);
  launch.api = kind.api;
  {
    DiagScope timing(DiagSite::kEnterClock);
    launch.cpu_ns = cuptiNow();
    launch.device = deviceOf(cb->context, cb->contextUid);
  }
  const LaunchTarget target = launchTarget(domain, cbid, cb->functionParams);
  const int64_t stream = target.stream;
  const uint64_t exec = target.graph_exec;
  // A plain launch learns that it was captured from the graph node its call creates (the
  // GRAPHNODE_CREATED callback, on this thread, before its exit): no driver call per launch.
  // Graph launches and deep-window launches ask the driver (DETRACE_DIAG_CAPTURE_CHECK=1: every
  // launch does, as before).
  static const bool always_check = [] {
    const char* v = std::getenv("DETRACE_DIAG_CAPTURE_CHECK");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  const bool fast_path = !kind.graph && !deep;
  bool capturing = false;
  if (!kind.graph && (!fast_path || always_check)) {
    DiagScope timing(DiagSite::kCaptureCheck);
    capturing = isCapturing(stream);
  }
  if (capturing) {
    // Captured into a CUDA graph, not run: its kernels appear when the graph is launched. Entered
    // all the same (without a slot), so that a runtime launch's driver half is known as such and
    // not counted by the gates as a launch of its own.
    s.addStat("launches_captured", 1);
    t_nesting.enter(runtime, 0, kind.graph);
    return;
  }
  {
    DiagScope timing(DiagSite::kEnterStream);
    // A graph launch when kernels are placed: keyed like the records of kernels placed on its
    // stream, so both show as one stream.
    int64_t record_stream = db::kUnset;
    launch.stream = placementByRecords() ? opStreamId(*w, stream, launch.device, record_stream)
                                         : cachedStreamId(*w, stream, launch.device);
  }
  Fingerprinter::ReplayPlan replay;
  bool replays = false;
  if (kind.graph) {
    launch.is_graph = true;
    launch.graph_key = exec;
    launch.expected_activities = expectedGraphRecords(exec);
    launch.name = w->intern(runtime ? "cudaGraphLaunch" : "cuGraphLaunch");
    // Library ops captured into the graph with their digests: this launch replays them. A graph
    // launch into a stream being captured is refused by the driver (580, CUDA 13: probed on the
    // H200): it fails, and is recorded as a failed launch. (A per-thread default stream is asked
    // about as itself: 0 would ask the legacy stream.)
    replays = !isCapturing(reinterpret_cast<int64_t>(launchStream(domain, cbid, stream))) &&
              Fingerprinter::get().planReplay(exec, replay);
    if (replays) {
      launch.graph_ops = replay.ops;
      launch.graph_op_comm_seqs = std::move(replay.comm_seqs);
      launch.graph_replay = replay.replay;
    }
  } else if (cb->symbolName != nullptr) {
    // Known at API time: names the event even if its activity record never comes.
    DiagScope timing(DiagSite::kEnterName);
    launch.name = kernelName(*w, cb->symbolName, target.function);
  }
  launch.notify_written = deep;
  if (fast_path) {
    // The fast path: the slot is taken at the API exit, without a lock.
    DiagScope timing(DiagSite::kEnterSlot);
    InFlightLaunch& f = inFlight();
    f.launch = std::move(launch);
    f.parent = currentParent();
    f.alias = 0;
    f.runtime = runtime;
    f.captured = false;
    f.buffer = buffer;
    f.generation = buffer->launchEntering();
    f.active = true;
    t_nesting.enter(runtime, 0, false);  // no token: the slot is taken at the exit
    return;
  }
  uint64_t token = 0;
  {
    DiagScope timing(DiagSite::kEnterSlot);
    token = buffer->addLaunch(launch, currentParent());
  }
  if (replays) {
    Fingerprinter::get().beginReplay(replay, launchStream(domain, cbid, stream), token);
    t_nesting.openGraph(runtime);
  } else if (kind.graph) {  // recorded, without results: its graph may still read cells
    orderUnrecordedGraphLaunch(domain, cbid, cb->functionParams, runtime);
  }
  if (deep) deep::beginLaunch(token, deep_ticket.index, deep_ticket.speculative);
  t_nesting.enter(runtime, token, kind.graph);
  if (!runtime && deep) deep::driverEnter(cbid, cb->functionParams, token);
}

// Whether the API call of an exit callback returned an error.
bool callFailed(const CUpti_CallbackData* cb, bool runtime) {
  if (cb->functionReturnValue == nullptr) return false;
  return runtime ? *static_cast<const cudaError_t*>(cb->functionReturnValue) != cudaSuccess
                 : *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS;
}

// A launch's API exit: the fast path's slot is published; a failed launch never produces a GPU
// record.
void onLaunchExit(const CUpti_CallbackData* cb, const LaunchKind& kind, bool runtime, Session& s) {
  // (A graph launch is never the plain launch in flight: that one's exit may have been lost to a
  // stop.)
  if (InFlightLaunch& f = inFlight(); !kind.graph && f.active && f.runtime == runtime) {
    f.active = false;
    const bool failed = callFailed(cb, runtime);
    if (runtime) {
      t_nesting.leaveRuntime();
      deep::endLaunch();
    } else {
      deep::driverExit(failed);
    }
    if (f.captured) {  // captured into a CUDA graph: its kernels come with the graph's launches
      f.buffer->launchAbandoned(f.generation);
      s.addStat("launches_captured", 1);
    } else {
      f.buffer->addLaunchAtExit(std::move(f.launch), f.parent, f.alias, failed, f.generation);
    }
    return;
  }
  const bool failed = callFailed(cb, runtime);
  const LaunchNesting::Exit ex = t_nesting.exit(runtime, kind.graph);
  const uint64_t token = ex.token;
  if (!kind.graph) {  // (a graph launch is never a deep one)
    if (runtime) {
      deep::endLaunch();
    } else {
      deep::driverExit(failed);  // the kernel is queued: fingerprint what it left behind
    }
  }
  if (ex.close_graph) Fingerprinter::get().endReplay(failed);  // after the graph: close its digests
  if (failed && token != 0) {  // its slot was taken in this buffer, maybe before a stop
    if (ReorderBuffer* b = s.startedBuffer()) b->launchFailed(token);
  }
}

void onLaunch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  if (selfLaunchFlag()) return;  // the tracer's own digest kernels
  if (uint64_t epoch = g_capture_epoch.load(std::memory_order_relaxed); epoch != t_capture_epoch) {
    t_capture_epoch = epoch;
    t_nesting.reset();
    inFlight().active = false;
    resetWriterIdCaches();
    deep::resetThread();
    // A graph launch left open here is still in its call (graph launches' callbacks stay on while
    // any graph holds captured digests): its exit ends it. One whose exit was lost is ended at
    // this thread's next graph launch (Fingerprinter::abandonReplay).
  }
  LaunchKind kind;
  if (!classifyLaunch(domain, cbid, kind)) return;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  Session& s = Session::get();
  // DETRACE_DIAG_GRAPH_CALLBACKS=1: a line per graph launch callback, as it comes (diagnosis only).
  static const bool diag_graph = [] {
    const char* v = std::getenv("DETRACE_DIAG_GRAPH_CALLBACKS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (diag_graph && kind.graph) {
    logLine("diag graph callback: thread %ld %s %u %s corr %u depth %d open %d capturing %d epoch %llu",
            static_cast<long>(syscall(SYS_gettid)), runtime ? "runtime" : "driver", static_cast<unsigned>(cbid),
            cb->callbackSite == CUPTI_API_ENTER ? "enter" : "exit", cb->correlationId, t_nesting.depth(),
            t_nesting.graphOpen() ? 1 : 0, s.buffer() != nullptr ? 1 : 0,
            static_cast<unsigned long long>(t_capture_epoch));
  }
  if (cb->callbackSite != CUPTI_API_ENTER) {
    onLaunchExit(cb, kind, runtime, s);
  } else if (!runtime && t_nesting.driverHalf(kind.graph)) {
    onDriverHalfEnter(cbid, cb, s);
  } else {
    onLaunchEnter(domain, cbid, cb, kind, runtime, s);
  }
}

// Activity records expected from one launch of a graph: its kernel, memcpy and memset nodes,
// child graphs included. kRecordsVary if it has a conditional node anywhere (a while loop's or an
// if's body runs as often as the GPU decides at each launch: no count holds for the next launch),
// else kRecordsUnknown if some nodes cannot be read. The child graphs met on the way are added to
// `children` (where captured digests may hide); its own kernel, memcpy and memset nodes to `top`
// where given (GraphRecordCounts::rememberNodes).
int32_t countGraphRecords(CUgraph graph, int depth, std::vector<CUgraph>& children,
                          std::vector<uint64_t>* top = nullptr) {
  using GetNodes = CUresult (*)(CUgraph, CUgraphNode*, size_t*);
  using GetType = CUresult (*)(CUgraphNode, CUgraphNodeType*);
  using ChildGraph = CUresult (*)(CUgraphNode, CUgraph*);
  static auto get_nodes = reinterpret_cast<GetNodes>(loadedSymbol("cuGraphGetNodes", "libcuda.so"));
  static auto get_type = reinterpret_cast<GetType>(loadedSymbol("cuGraphNodeGetType", "libcuda.so"));
  static auto child = reinterpret_cast<ChildGraph>(loadedSymbol("cuGraphChildGraphNodeGetGraph", "libcuda.so"));
  if (!get_nodes || !get_type || !child || depth > 8) return kRecordsUnknown;
  size_t n = 0;
  if (get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n > 100000) return kRecordsUnknown;
  std::vector<CUgraphNode> nodes(n);
  if (n > 0 && get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return kRecordsUnknown;
  int32_t total = 0;
  bool unknown = false;  // kept looking: a conditional node after it still makes the count vary
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (get_type(node, &type) != CUDA_SUCCESS) {
      unknown = true;
      continue;
    }
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
      case CU_GRAPH_NODE_TYPE_MEMCPY:
      case CU_GRAPH_NODE_TYPE_MEMSET:
        ++total;
        if (top != nullptr) top->push_back(reinterpret_cast<uint64_t>(node));
        break;
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph sub = nullptr;
        if (child(node, &sub) != CUDA_SUCCESS) {
          unknown = true;
          break;
        }
        if (children.size() < 1024) children.push_back(sub);
        const int32_t c = countGraphRecords(sub, depth + 1, children);
        if (c == kRecordsVary) return kRecordsVary;
        if (c < 0) unknown = true;
        total += std::max(c, 0);
        break;
      }
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: return kRecordsVary;
      default: break;
    }
  }
  return unknown ? kRecordsUnknown : total;
}

// CUPTI's id of a context, as its activity records carry it; 0 if unknown.
uint32_t cuptiContextId(CUcontext context) {
  uint32_t id = 0;
  if (context == nullptr || g_cupti.context_id == nullptr) return 0;
  return g_cupti.context_id(context, &id) == CUPTI_SUCCESS ? id : 0;
}

// The context's records must be collected while it still exists; then they are committed, so a
// program that dies after tearing its context down keeps them. With placement, the records held
// for ordering are written too: all of them where no other context is left, else the dying
// context's and what is placed before them (another context, still running, may yet send records
// placed before its own held ones).
void onContextTeardown(CUcontext context) {
  diagTeardown("context destroy starting");
  const uint32_t context_id = cuptiContextId(context);
  {
    // Waiting for the flusher's turn and for the records to settle overlap: together at most
    // max(kMaxWaitMs, the settle cap).
    std::unique_lock turn(g_flush_call_mu, std::defer_lock);
    (void)turn.try_lock_for(std::max<std::chrono::nanoseconds>(settleWait(), std::chrono::milliseconds(kMaxWaitMs)));
    forcedFlush();
  }
  awaitBuffersInHand();
  diagTeardown("after the forced flush and the buffers in hand");
  Fingerprinter::get().forgetContext(context);  // its result memory dies with it
  forgetOwnStream(context);                      // and the tracer's own stream
  bool others = false;
  {
    std::lock_guard lk(g_cache_mu);
    std::erase(g_contexts, context);
    others = !g_contexts.empty();
  }
  Session::get().commit(Session::Held::kSettle, others ? context_id : 0);
  g_torn_down.store(true);
  diagTeardown("committed");
}

// CUPTI's id of a graph callback's node (`original`: of the node it was copied from); 0 if none.
uint64_t graphNodeId(const CUpti_ResourceData* data, bool original) {
  auto* g = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
  CUgraphNode node = g == nullptr ? nullptr : original ? g->originalNode : g->node;
  uint64_t id = 0;
  if (node == nullptr || g_cupti.graph_node_id == nullptr || g_cupti.graph_node_id(node, &id) != CUPTI_SUCCESS) {
    return 0;
  }
  return id;
}

void onResource(CUpti_CallbackId cbid, const CUpti_ResourceData* data) {
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    // Inside a plain launch's call: the launch went into a graph being captured.
    if (InFlightLaunch& f = inFlight(); f.active) f.captured = true;
    // Inside a library call being captured: one of its kernels (CallNodeScope).
    if (CallNodeScope::open() && !selfLaunchFlag()) {
      if (uint64_t id = graphNodeId(data, false)) CallNodeScope::note(id);
    }
    return;
  }
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
    // A captured op's node copied into an executable (or cloned, or parent) graph: so is its copy.
    uint64_t original = graphNodeId(data, true), copy = graphNodeId(data, false);
    if (original != 0 && copy != 0) Fingerprinter::get().noteNodeCloned(original, copy);
    return;
  }
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED) {
    auto* g = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
    if (g == nullptr || g->graph == nullptr) return;
    std::vector<CUgraph> graphs{g->graph};
    std::vector<uint64_t> nodes;  // kept until the first start (enableGraphUpdateCallbacks)
    const bool keep_nodes = !g_graph_records.following();
    int32_t records = countGraphRecords(g->graph, 0, graphs, keep_nodes ? &nodes : nullptr);
    // Library ops captured with their digests into this graph (or a child): its launches replay them.
    const auto exec = reinterpret_cast<uint64_t>(g->graphExec);
    Fingerprinter::get().noteExec(exec, data->context, graphs);
    g_graph_records.instantiated(exec, records);
    if (keep_nodes) g_graph_records.rememberNodes(exec, reinterpret_cast<uint64_t>(g->graph), std::move(nodes));
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING) {
    auto* g = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
    if (g == nullptr) return;
    const uint64_t exec = reinterpret_cast<uint64_t>(g->graphExec);
    Fingerprinter::get().forgetExec(exec);
    // Its record count goes with it: a graph made later at its address has its own, and the
    // table stays bounded by the executable graphs alive rather than by all ever made.
    g_graph_records.forget(exec);
    if (ReorderBuffer* b = Session::get().startedBuffer()) b->forgetGraph(exec);
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPH_CLONED) {
    auto* g = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
    if (g != nullptr) Fingerprinter::get().noteGraphCloned(g->originalGraph, g->graph);
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING) {
    auto* g = static_cast<const CUpti_GraphData*>(data->resourceDescriptor);
    if (g == nullptr) return;
    Fingerprinter::get().forgetGraph(g->graph);
    g_graph_records.graphDestroyed(reinterpret_cast<uint64_t>(g->graph));
  } else if (cbid == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
    NameCache::forgetHandles();  // its functions' handles may name other kernels from now on
    if (deep::enabled()) deep::onModuleUnload();
  } else if (cbid == CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING) {
    g_stream_epoch.fetch_add(1, std::memory_order_release);  // its handle may come back (opStreamId)
  } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
    Fingerprinter::get().noteContextCreated(data->context);  // a handle torn down before may be back
    std::lock_guard lk(g_cache_mu);
    if (data->context != nullptr && g_contexts.size() < kMaxContexts) g_contexts.push_back(data->context);
  } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    g_context_epoch.fetch_add(1, std::memory_order_release);  // its handle may come back
    onContextTeardown(data->context);
  }
}

// cuGraphExecUpdate (and the runtime's, which calls it): the executable graph gets another graph's
// nodes, whose captured digests it would then share with that graph's own executable graph. Only
// an update that took place counts (a refused one leaves the executable graph as it was), and no
// launch of it can come between the call's start and its end (CUDA's rules on one graph object).
void onGraphExecUpdate(const CUpti_CallbackData* cb) {
  if (cb->functionParams == nullptr || cb->callbackSite != CUPTI_API_EXIT ||
      cb->functionReturnValue == nullptr ||
      *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS) {
    return;
  }
  // Both versions' parameters begin with hGraphExec, hGraph.
  const auto* p = static_cast<const cuGraphExecUpdate_v2_params*>(cb->functionParams);
  const auto exec = reinterpret_cast<uint64_t>(p->hGraphExec);
  Fingerprinter::get().noteExecUpdated(exec, p->hGraph);
  g_graph_records.updated(exec);
}

// cuGraphNodeSetEnabled (and the runtime's, which calls it): a disabled kernel, memcpy or memset
// node gives no activity record, so the executable graph's record count follows its nodes' state,
// read before the call and applied once the call succeeded.
struct NodeEnabling {
  bool was_known = false, was = true, gives_record = false;
};
thread_local NodeEnabling t_node_enabling;

void onNodeSetEnabled(const CUpti_CallbackData* cb) {
  if (cb->functionParams == nullptr) return;
  const auto* p = static_cast<const cuGraphNodeSetEnabled_params*>(cb->functionParams);
  if (cb->callbackSite == CUPTI_API_ENTER) {
    using GetEnabled = CUresult (*)(CUgraphExec, CUgraphNode, unsigned int*);
    using GetType = CUresult (*)(CUgraphNode, CUgraphNodeType*);
    static auto get_enabled = reinterpret_cast<GetEnabled>(loadedSymbol("cuGraphNodeGetEnabled", "libcuda.so"));
    static auto get_type = reinterpret_cast<GetType>(loadedSymbol("cuGraphNodeGetType", "libcuda.so"));
    NodeEnabling e;
    unsigned int was = 1;
    CUgraphNodeType type{};
    const bool typed = get_type != nullptr && get_type(p->hNode, &type) == CUDA_SUCCESS;
    e.gives_record = !typed || type == CU_GRAPH_NODE_TYPE_KERNEL || type == CU_GRAPH_NODE_TYPE_MEMCPY ||
                     type == CU_GRAPH_NODE_TYPE_MEMSET;
    e.was_known = typed && get_enabled != nullptr && get_enabled(p->hGraphExec, p->hNode, &was) == CUDA_SUCCESS;
    e.was = was != 0;
    t_node_enabling = e;
    return;
  }
  if (cb->functionReturnValue == nullptr || *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS) {
    return;  // refused: nothing changed
  }
  const NodeEnabling& e = t_node_enabling;
  const auto exec = reinterpret_cast<uint64_t>(p->hGraphExec);
  const bool now = p->isEnabled != 0;
  if (!g_graph_records.nodeEnabled(exec, e.gives_record, e.was_known, e.was, now)) {
    // Not followed (past the bound): the count learnt from a launch no longer holds.
    if (ReorderBuffer* b = Session::get().startedBuffer()) b->forgetGraph(exec);
  }
  if (!now && Fingerprinter::get().noteExecNodeDisabled(exec)) {
    static std::once_flag said;
    std::call_once(said, [] {
      logLine("a CUDA graph holding captured library calls had a node disabled (cudaGraphNodeSetEnabled): "
              "its launches are recorded without those calls' fingerprints from now on");
    });
  }
}

// The diagnostics site of a callback (diag_timing.h), from the thread's launch nesting as it was
// when the callback began.
DiagSite callbackSite(CUpti_CallbackDomain domain, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) {
    return DiagSite::kOtherCallback;
  }
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API && t_nesting.depth() > 0) return DiagSite::kNestedDriver;
  return static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_ENTER
             ? DiagSite::kLaunchEnter
             : DiagSite::kLaunchExit;
}

// The driver calls by which the tracer copies and zeroes memory of its own (full capture's copies,
// the fingerprints' result memory, deep mode's zero fill): made inside a SelfLaunchScope, their
// activity records must not become program events (ReorderBuffer::ignoreCorrelation).
constexpr CUpti_CallbackId kOwnMemoryCallbacks[] = {CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
                                                    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2};

bool isOwnMemoryCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return false;
  return std::find(std::begin(kOwnMemoryCallbacks), std::end(kOwnMemoryCallbacks), cbid) !=
         std::end(kOwnMemoryCallbacks);
}

void onOwnMemoryApi(const CUpti_CallbackData* cb) {
  if (cb->callbackSite != CUPTI_API_ENTER || !selfLaunchFlag()) return;
  // startedBuffer(): never starts anything from here, and still there while a stop drains.
  if (ReorderBuffer* b = Session::get().startedBuffer()) {
    b->ignoreCorrelation(unwrapCorrelation(cb->correlationId), cuptiNow());
  }
}

void CUPTIAPI onCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (!g_active.load(std::memory_order_relaxed) || data == nullptr) return;
  CallbackRepeats& repeats = t_repeats;  // callback_repeats.h
  const bool api = domain == CUPTI_CB_DOMAIN_RUNTIME_API || domain == CUPTI_CB_DOMAIN_DRIVER_API;
  const auto* cb_data = static_cast<const CUpti_CallbackData*>(data);
  if (repeats.begin(api, domain, cbid, api ? cb_data->callbackSite : 0, api ? cb_data->correlationId : 0)) {
    g_callbacks_repeated.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  struct End {
    CallbackRepeats& r;
    ~End() { r.end(); }
  } end_callback{repeats};
  // The marker's own callback counts as "other": its whole call is the marker site.
  const bool marker = domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == kMarkerCallback;
  DiagScope timing(diagTimingOn() && !marker && !isOwnMemoryCallback(domain, cbid)
                       ? callbackSite(domain, data)
                       : DiagSite::kOtherCallback);
  try {
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
      onResource(cbid, static_cast<const CUpti_ResourceData*>(data));
    } else if (domain == CUPTI_CB_DOMAIN_NVTX) {
      onNvtxCallback(cbid, data);
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate ||
                                                       cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2)) {
      onGraphExecUpdate(static_cast<const CUpti_CallbackData*>(data));
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled) {
      onNodeSetEnabled(static_cast<const CUpti_CallbackData*>(data));
    } else if (marker) {
      const auto* cb = static_cast<const CUpti_CallbackData*>(data);
      if (cb->callbackSite == CUPTI_API_ENTER) t_marker_correlation = unwrapCorrelation(cb->correlationId);
    } else if (isOwnMemoryCallback(domain, cbid)) {
      onOwnMemoryApi(static_cast<const CUpti_CallbackData*>(data));
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && deep::isMemoryCallback(cbid)) {
      deep::onMemoryApi(cbid, static_cast<const CUpti_CallbackData*>(data));
    } else {
      onLaunch(domain, cbid, static_cast<const CUpti_CallbackData*>(data));
    }
  } catch (const std::exception& e) {
    Session::get().fail("in a CUPTI callback", e.what());
  } catch (...) {
    Session::get().fail("in a CUPTI callback");
  }
}

// ---- activity records ----

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  std::lock_guard lk(g_pool_mu);
  if (!g_pool.empty()) {
    *buffer = g_pool.back();
    g_pool.pop_back();
    *size = bufferBytes();
    return;
  }
  ++g_buffers_refused;
  if (g_may_reject) {
    *buffer = nullptr;  // CUPTI drops records until a buffer comes back (counted by CUPTI)
    *size = 0;
    return;
  }
  *buffer = newBuffer();
  *size = *buffer ? bufferBytes() : 0;
}

void CUPTIAPI bufferCompleted(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  DiagScope timing(DiagSite::kActivityBuffer);
  struct InHand {
    InHand() { g_buffers_in_hand.fetch_add(1, std::memory_order_relaxed); }
    ~InHand() { g_buffers_in_hand.fetch_sub(1, std::memory_order_release); }
  } in_hand;
  try {
    // Not buffer()/writer(): records of launches made before a capture stop still count.
    Session& s = Session::get();
    ReorderBuffer* rb = s.startedBuffer();
    db::TraceWriter* w = s.startedWriter();
    if (rb != nullptr && w != nullptr) {
      CUpti_Activity* rec = nullptr;
      int64_t records = 0;  // counted for the teardown diagnostics only
      while (g_cupti.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        ++records;
        Activity a;
        if (decodeActivity(*w, rec, a)) {
          if (g_diag_teardown) {
            logLine("teardown: %.3f ms: record of correlation %llu, GPU end %.3f ms ago", diagMs(),
                    static_cast<unsigned long long>(a.correlation_id), (cuptiNow() - a.gpu_end_ns) / 1e6);
          }
          Session::get().noteDevice(a.device);
          rb->addActivity(a);
        }
      }
      size_t dropped = 0;
      if (g_cupti.dropped_records(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped > 0) {
        s.addStat("cupti_records_dropped", static_cast<int64_t>(dropped));
      }
      if (g_diag_teardown) {
        g_records_read.fetch_add(records, std::memory_order_relaxed);
        g_buffers_read.fetch_add(1, std::memory_order_relaxed);
        logLine("teardown: %.3f ms: buffer of stream %u: %zu valid bytes, %lld records, %zu dropped%s", diagMs(), stream_id, valid,
                static_cast<long long>(records), dropped, g_torn_down.load() ? ", AFTER the teardown commit" : "");
      }
      rb->poll(cuptiNow());
    }
  } catch (...) {
    Session::get().fail("while reading CUPTI activity records");
  }
  if (buffer != nullptr) {
    if (g_zeroed_buffers) std::memset(buffer, 0, bufferBytes());
    std::lock_guard lk(g_pool_mu);
    g_pool.push_back(buffer);
  }
}

// A writer that failed for good (a full disk, the file-size limit, a file that went away) writes
// nothing more: stop recording, and CUPTI's records and launch callbacks with it, so the program
// no longer pays for it. The sink may have stopped the recording already (WriterSink), which
// leaves CUPTI on: hence the writer's status, not startedWriter(). Both calls do nothing the
// second time (fail() logs once; stopCapture() returns at once when not capturing).
void failIfWriterStopped() {
  if (Session::get().failIfWriterFailed()) (void)Session::get().stopCapture();
}

// CUPTI's counters (totals) in the trace's stats: every second and at the end.
void publishCuptiStats() {
  Session& s = Session::get();
  if (s.startedWriter() == nullptr) return;
  if (int64_t refused = g_buffers_refused.load(); refused > 0) s.setStat("cupti_buffers_refused", refused);
  if (int64_t repeated = g_callbacks_repeated.load(); repeated > 0) {
    s.setStat("cupti_callbacks_repeated", repeated);
  }
}

void flusherLoop() {
  std::unique_lock lk(g_flush_mu);
  for (uint64_t round = 1; !g_flush_stop; ++round) {
    g_flush_cv.wait_for(lk, kFlushPeriod, [] { return g_flush_stop; });
    if (g_flush_stop) break;
    lk.unlock();
    try {  // the thread is the tracer's, but an exception leaving it would end the program
      {
        std::lock_guard turn(g_flush_call_mu);
        DiagScope timing(DiagSite::kPeriodicFlush);
        g_cupti.flush_all(0);
        if (g_diag_teardown) logLine("teardown: %.3f ms: periodic flush", diagMs());
      }
      if (ReorderBuffer* rb = Session::get().buffer()) rb->poll(cuptiNow());
      Fingerprinter::get().poll();
      failIfWriterStopped();
      if (round % kPublishEvery == 0) {
        publishCuptiStats();
        Session::get().publishStats();
      }
    } catch (const std::exception& e) {
      Session::get().fail("in the tracer's flusher thread", e.what());
    } catch (...) {
      Session::get().fail("in the tracer's flusher thread");
    }
    lk.lock();
  }
}

// The driver calls that wait for a context's work at exit (each null where the driver lacks it).
struct ContextWaitApi {
  using CtxGet = CUresult (*)(CUcontext*);
  using CtxSet = CUresult (*)(CUcontext);
  using EventCreate = CUresult (*)(CUevent*, unsigned int);
  using CtxRecordEvent = CUresult (*)(CUcontext, CUevent);
  using EventQuery = CUresult (*)(CUevent);
  using EventDestroy = CUresult (*)(CUevent);
  using CtxSync = CUresult (*)();
  CtxGet get = reinterpret_cast<CtxGet>(loadedSymbol("cuCtxGetCurrent", "libcuda.so"));
  CtxSet set = reinterpret_cast<CtxSet>(loadedSymbol("cuCtxSetCurrent", "libcuda.so"));
  EventCreate create = reinterpret_cast<EventCreate>(loadedSymbol("cuEventCreate", "libcuda.so"));
  CtxRecordEvent record = reinterpret_cast<CtxRecordEvent>(loadedSymbol("cuCtxRecordEvent", "libcuda.so"));
  EventQuery query = reinterpret_cast<EventQuery>(loadedSymbol("cuEventQuery", "libcuda.so"));
  EventDestroy destroy = reinterpret_cast<EventDestroy>(loadedSymbol("cuEventDestroy_v2", "libcuda.so"));
  CtxSync sync = reinterpret_cast<CtxSync>(loadedSymbol("cuCtxSynchronize", "libcuda.so"));
};

// Waits for the work of the thread's current context, until `deadline` at most. An event recorded
// for the whole context (cuCtxRecordEvent) is polled, so a kernel that never ends costs the wait,
// not the exit, and leaves no thread of ours inside the driver; without that call (drivers before
// CUDA 12.5), cuCtxSynchronize. False if the GPU was still busy at the deadline.
bool awaitCurrentContext(const ContextWaitApi& api, CUcontext ctx,
                         std::chrono::steady_clock::time_point deadline) {
  if (api.record == nullptr || api.create == nullptr || api.query == nullptr || api.destroy == nullptr) {
    if (api.sync != nullptr) (void)api.sync();
    return true;
  }
  CUevent ev = nullptr;
  if (api.create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return true;
  CUresult r = api.record(ctx, ev);
  if (r == CUDA_SUCCESS) {
    r = api.query(ev);
    while (r == CUDA_ERROR_NOT_READY && std::chrono::steady_clock::now() < deadline && !finishAbandoned()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      r = api.query(ev);
    }
  } else {
    logLine("cannot wait for the GPU's work at the end of the recording (cuCtxRecordEvent: error "
            "%d); kernels still running may have no GPU times in the trace", static_cast<int>(r));
  }
  if (g_diag_teardown) logLine("teardown: %.3f ms: context %p waited for: %d", diagMs(), static_cast<void*>(ctx), static_cast<int>(r));
  (void)api.destroy(ev);  // an event not yet reached is released when it is
  return r != CUDA_ERROR_NOT_READY;
}

// Kernels still running at exit have no activity record yet: wait for their work, until
// `deadline` at most. The current context's, or where the finishing thread has none (a signal
// is finished on a thread of the tracer's; exit() may be called from a thread that never used
// CUDA), every context the program launched into.
void awaitContextWork(std::chrono::steady_clock::time_point deadline) {
  static const ContextWaitApi api;
  if (api.get == nullptr) return;
  CUcontext current = nullptr;
  if (api.get(&current) != CUDA_SUCCESS) return;
  std::vector<CUcontext> contexts;
  try {
    if (current != nullptr) {
      contexts.push_back(current);
    } else if (api.set != nullptr) {
      std::lock_guard lk(g_cache_mu);
      contexts = g_contexts;
    }
  } catch (...) {
    return;
  }
  if (g_diag_teardown) {
    logLine("teardown: %.3f ms: waiting for %zu context(s), current %p", diagMs(), contexts.size(),
            static_cast<void*>(current));
  }
  bool idle = true;
  for (CUcontext ctx : contexts) {
    if (ctx != current && api.set(ctx) != CUDA_SUCCESS) continue;
    idle = awaitCurrentContext(api, ctx, deadline) && idle;
  }
  if (current == nullptr && !contexts.empty()) (void)api.set(nullptr);
  if (!idle) {
    logLine("the GPU was still busy when the trace was finished; kernels still running have no "
            "GPU times in it");
  }
}

// At exit (Session::finish): stop the flusher, collect every record, stop callbacks.
void finalFlush(std::chrono::steady_clock::time_point gpu_deadline) {
  try {
    {
      std::lock_guard lk(g_flush_mu);
      g_flush_stop = true;
    }
    g_flush_cv.notify_all();
    if (g_flusher != nullptr && g_flusher->joinable()) g_flusher->join();
    // Only a process that recorded has records to wait for (a paused one that never started
    // exits without waiting for the GPU).
    if (Session::get().startedWriter() != nullptr) awaitContextWork(gpu_deadline);
    if (finishAbandoned()) return;  // the process is tearing CUDA and CUPTI down
    if (g_active.load()) forcedFlush();
    awaitBuffersInHand();
    g_active = false;
    publishCuptiStats();
  } catch (...) {
  }
}

// Launch callbacks on (1) or off (0): the capture switch (Session::CaptureHooks).
bool setLaunchCallbacks(uint32_t on) {
  // Overhead diagnostics (bench/tracer/bench_overhead --diag): DETRACE_DIAG_LAUNCH_CALLBACKS=driver
  // leaves the runtime-API launch callbacks off (every runtime launch is then seen through its
  // driver half, recorded as a driver launch).
  // DETRACE_DIAG_LAUNCH_CALLBACKS=none leaves every launch callback off (kernels are then recorded
  // from their activity records alone, in arrival order).
  static const std::string which = [] {
    const char* v = std::getenv("DETRACE_DIAG_LAUNCH_CALLBACKS");
    return std::string(v != nullptr ? v : "");
  }();
  const bool driver_only = which == "driver";
  if (which == "none" && on) return true;
  // Placement by correlation id: only graph launches keep their callbacks (a graph's records
  // gather under its launch, and captured library ops are replayed from it).
  const bool graphs_only = on && g_placement.load(std::memory_order_relaxed);
  // Off: the driver's graph launches keep theirs once some graph holds captured digests. Those
  // digests read their cells at every launch, so every launch must stay ordered
  // (orderUnrecordedGraphLaunch), and a launch in progress at the stop must still see an exit: a
  // runtime graph launch's driver half gives both. The driver domain's cost is already paid after
  // the first start (enableGraphUpdateCallbacks); no runtime callback stays on while paused.
  const bool keep_graphs = !on && Fingerprinter::ordersGraphLaunches();
  for (CUpti_CallbackId id : kRuntimeLaunchCallbacks) {
    if (driver_only && on) break;
    if (graphs_only && !isGraphLaunchCallback(CUPTI_CB_DOMAIN_RUNTIME_API, id)) continue;
    DETRACE_CUPTI_CALL(g_cupti.enable_callback(on, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, id), "runtime launch callback");
  }
  for (CUpti_CallbackId id : kDriverLaunchCallbacks) {
    const bool graph = isGraphLaunchCallback(CUPTI_CB_DOMAIN_DRIVER_API, id);
    if ((graphs_only && !graph) || (keep_graphs && graph)) continue;
    DETRACE_CUPTI_CALL(g_cupti.enable_callback(on, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id), "driver launch callback");
  }
  return true;
}

// Whether this capture places kernel records by correlation id instead of taking launch
// callbacks: not where launch callbacks are needed (a recording window or deep window counts
// and selects launches at API time; full capture), nor where asked for
// (`record --launch-callbacks`: DETRACE_LAUNCH_CALLBACKS=1; the overhead diagnostics).
bool placementWanted() {
  static const bool callbacks_asked = [] {
    const char* v = std::getenv("DETRACE_LAUNCH_CALLBACKS");
    const char* diag = std::getenv("DETRACE_DIAG_LAUNCH_CALLBACKS");
    return (v != nullptr && std::strcmp(v, "1") == 0) || (diag != nullptr && *diag != '\0');
  }();
  Session& s = Session::get();
  return !callbacks_asked && s.policy().level != CaptureLevel::kFull && s.deepGate() == nullptr &&
         !s.gate().windowed();
}

bool setMarkerCallback(uint32_t on) {
  DETRACE_CUPTI_CALL(g_cupti.enable_callback(on, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, kMarkerCallback),
                     "marker callback");
  return true;
}

// Kernel, memcpy and memset records on or off: the capture switch. Off (and launch callbacks off),
// what is left of CUPTI is its subscription: +1..5% of the CPU time of a pure launch loop on the
// H200, inside process-to-process noise (tests/tracer/gpu_attach_test.cc). Unsubscribing while
// paused would save that but lose the graph callbacks that count a graph's records.
bool setActivities(bool on) {
  // Overhead diagnostics: DETRACE_DIAG_ACTIVITIES=0 never turns the records on (launches are then
  // written without GPU times after the reorder timeout).
  static const bool no_records = [] {
    const char* v = std::getenv("DETRACE_DIAG_ACTIVITIES");
    return v != nullptr && std::string(v) == "0";
  }();
  if (on && no_records) return true;
  if (g_diag_teardown) logLine("teardown: %.3f ms: activity records %s", diagMs(), on ? "on" : "off");
  if (on) g_records_on_ns.store(steadyNs(), std::memory_order_relaxed);
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET}) {
    DETRACE_CUPTI_CALL(on ? g_cupti.activity_enable(kind) : g_cupti.activity_disable(kind),
                       on ? "activity records on" : "activity records off");
  }
  return true;
}

// cuGraphExecUpdate callbacks (graph_fingerprints.cc: an executable graph given other nodes stops
// being followed) and cuGraphNodeSetEnabled's (a graph launch's record count, GraphRecordCounts).
// They matter only for graphs launched while capturing, so they are turned on at the first start
// and stay on; the nodes the program disabled before then are read from the graphs that can still
// have nodes named (GraphRecordCounts::startFollowing). Not at load: any driver-API callback makes
// CUPTI intercept every driver call of the process, which a tracer that is loaded paused
// (`record --paused`) and never started must not cost.
bool enableGraphUpdateCallbacks() {
  static bool on = false;  // captureOn runs under the session's capture lock
  if (on) return true;
  for (CUpti_CallbackId id : {CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate, CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2,
                              CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled}) {
    DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id),
                       "graph update callback");
  }
  on = true;
  using GetEnabled = CUresult (*)(CUgraphExec, CUgraphNode, unsigned int*);
  static auto get_enabled = reinterpret_cast<GetEnabled>(loadedSymbol("cuGraphNodeGetEnabled", "libcuda.so"));
  g_graph_records.startFollowing([](uint64_t exec, uint64_t node) {
    unsigned int enabled = 1;
    if (get_enabled == nullptr || get_enabled(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUgraphNode>(node),
                                              &enabled) != CUDA_SUCCESS) {
      return -1;
    }
    return enabled == 0 ? 1 : 0;
  });
  return true;
}

// The callbacks by which the tracer's own copies and memsets are told apart (kOwnMemoryCallbacks):
// turned on at the first start at a level that makes them (digest, full, deep) and left on; not at
// load, for the same reason as the graph update callbacks.
bool enableOwnMemoryCallbacks() {
  static bool on = false;  // captureOn runs under the session's capture lock
  if (on) return true;
  for (CUpti_CallbackId id : kOwnMemoryCallbacks) {
    if (g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, id) != CUPTI_SUCCESS) {
      return false;
    }
  }
  on = true;
  return true;
}

void captureOn() {
  // Launches whose API exit the last stop cut off never end: forget them (see launchEntering).
  ReorderBuffer* buffer = Session::get().startedBuffer();
  if (buffer != nullptr) buffer->resetInFlight();
  const bool placement = placementWanted() && setMarkerCallback(1);
  g_placement.store(placement, std::memory_order_relaxed);
  if (buffer != nullptr) buffer->setPlaceRecords(placement);
  if (db::TraceWriter* w = Session::get().startedWriter()) {
    w->setMeta("kernel_placement", placement ? "correlation" : "callbacks");
  }
  g_capture_epoch.fetch_add(1, std::memory_order_relaxed);
  if (!enableGraphUpdateCallbacks()) {
    logLine("executable graphs updated (cudaGraphExecUpdate) or with nodes disabled (cudaGraphNodeSetEnabled) "
            "are not noticed (CUPTI refused the callback)");
  }
  if ((Session::get().policy().level != CaptureLevel::kMeta || deep::enabled()) &&
      !enableOwnMemoryCallbacks()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      logLine("the tracer's own copies and memsets may show as program events (CUPTI refused their callbacks)");
    }
  }
  if (!setActivities(true) || !setLaunchCallbacks(1)) {
    logLine("kernels are not recorded (CUPTI refused to turn tracing on); NCCL and cuBLAS calls still are");
  }
}
void launchesOff() {
  (void)setLaunchCallbacks(0);
  if (g_placement.exchange(false, std::memory_order_relaxed)) (void)setMarkerCallback(0);
}
void drainActivities() { forcedFlush(); }
void activitiesOff() {
  (void)setActivities(false);
  forcedFlush();
}

// The callbacks that stay on whatever the capture switch says (they are rare, and none is in the
// runtime or driver API domains but deep mode's allocation callbacks): graph instantiation (to
// count a graph's records), contexts' creation and teardown, and NVTX. The driver-API callbacks that every
// capture needs are turned on at the first start (enableGraphUpdateCallbacks,
// enableOwnMemoryCallbacks).
bool enableCallbacks() {
  DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                             CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED), "graph callback");
  // Where the digests captured into graphs go (graph_fingerprints.cc): copies and ends of graphs.
  for (CUpti_CallbackId id : {CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING, CUPTI_CBID_RESOURCE_GRAPH_CLONED,
                              CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING}) {
    DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, id),
                       "graph callback");
  }
  for (CUpti_CallbackId id : {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING}) {
    DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE, id), "context callback");
  }
  DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                             CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING), "stream callback");
  // Graph nodes created inside a plain launch's call: the launch was captured (see onLaunch); and
  // inside a library call being captured: its kernels, whose copies (GRAPHNODE_CLONED, at
  // instantiation) its replays' records name (CallNodeScope).
  DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                             CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED), "graph node callback");
  setGraphNodeIdsUsable(g_cupti.graph_node_id != nullptr &&
                        g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                                CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) == CUPTI_SUCCESS);
  // Module unloads: kernel names are remembered by function handle (and deep mode's parameter
  // layouts by function), which an unload may hand to other kernels.
  DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                             CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING), "module callback");
  // Deep mode tracks allocations from the start, whatever the capture switch says.
  if (deep::enabled()) {
    size_t n = 0;
    const CUpti_CallbackId* ids = deep::memoryCallbacks(n);
    for (size_t i = 0; i < n; ++i) {
      DETRACE_CUPTI_CALL(g_cupti.enable_callback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]),
                         "deep-window allocation callback");
    }
  }
  // NVTX ranges (steps, layers): optional, they only arrive when NVTX_INJECTION64_PATH is CUPTI.
  if (g_cupti.enable_domain(1, g_subscriber, CUPTI_CB_DOMAIN_NVTX) != CUPTI_SUCCESS) {
    logLine("NVTX ranges are not recorded (CUPTI refused the NVTX domain)");
  }
  return true;
}

bool enableActivities() {
  uint32_t version = 0;
  if (g_cupti.version(&version) == CUPTI_SUCCESS) g_may_reject = version >= 27;
  const char* zeroed = std::getenv("DETRACE_ZEROED_BUFFERS");
  if (zeroed == nullptr || std::strcmp(zeroed, "0") != 0) {
    uint8_t on = 1;
    size_t size = sizeof(on);
    // Before the callbacks are registered, so that CUPTI takes it for every buffer. If CUPTI
    // refuses, it clears the buffers itself: slower, still correct.
    g_zeroed_buffers = g_cupti.set_attribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &size, &on) == CUPTI_SUCCESS;
    if (!g_zeroed_buffers) logLine("CUPTI refused zeroed activity buffers; recording launches costs more");
  } else {
    g_zeroed_buffers = false;
  }
  {
    std::lock_guard lk(g_pool_mu);
    for (size_t i = 0; i < kPoolBuffers; ++i) {
      if (uint8_t* b = newBuffer()) g_pool.push_back(b);
    }
  }
  DETRACE_CUPTI_CALL(g_cupti.register_callbacks(bufferRequested, bufferCompleted), "activity buffers");
  return true;  // the kinds themselves are turned on by captureOn()
}

bool start() {
  std::string error;
  if (!g_cupti.load(error)) {
    logLine("%s; kernels are not recorded, NCCL and cuBLAS calls still are", error.c_str());
    return false;
  }
  CUptiResult r = g_cupti.subscribe(&g_subscriber, onCallback, nullptr);
  if (r != CUPTI_SUCCESS) {
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      logLine("another profiler (nsys, ncu, torch.profiler, ...) holds CUPTI; kernels are not "
              "recorded, NCCL and cuBLAS calls still are. Record without the other profiler.");
    } else {
      logLine("cuptiSubscribe failed: %s; kernels are not recorded, NCCL and cuBLAS calls still are",
              g_cupti.errorText(r));
    }
    return false;
  }
  g_active = true;
  if (!enableCallbacks() || !enableActivities()) {
    g_active = false;
    setGraphNodeIdsUsable(false);  // no GRAPHNODE callbacks will come
    g_cupti.unsubscribe(g_subscriber);
    logLine("kernels are not recorded (CUPTI setup failed); NCCL and cuBLAS calls still are");
    return false;
  }
  Session::get().setClock(cuptiNow);
  Session::get().setFlushHook(finalFlush);
  // Launch callbacks and activity records follow the capture switch; on now unless paused.
  Session::CaptureHooks hooks;
  hooks.start = captureOn;
  hooks.stop_launches = launchesOff;
  hooks.drain = drainActivities;
  hooks.stop_activities = activitiesOff;
  Session::get().setCaptureHooks(hooks);
  {
    SignalsBlockedScope blocked;  // the flusher never takes the host's signals
    g_flusher = new std::thread(flusherLoop);
  }
  cuptiFlusherStarted();  // the LD_PRELOAD layer's commit thread hands over (commit_thread.h)
  return true;
}

}  // namespace

bool placementByRecords() { return g_placement.load(std::memory_order_relaxed); }

uint64_t streamEpoch() noexcept { return g_stream_epoch.load(std::memory_order_acquire); }

uint64_t contextEpoch() noexcept { return g_context_epoch.load(std::memory_order_acquire); }

uint64_t markerCorrelation() noexcept {
  if (!g_placement.load(std::memory_order_relaxed)) return 0;
  using DriverVersionFn = CUresult (*)(int*);
  static const auto fn = reinterpret_cast<DriverVersionFn>(loadedSymbol("cuDriverGetVersion", "libcuda.so"));
  if (fn == nullptr) return 0;
  DiagScope timing(DiagSite::kMarker);
  t_marker_correlation = 0;
  int version = 0;
  (void)fn(&version);
  return t_marker_correlation;
}

int64_t opStreamId(db::TraceWriter& w, int64_t handle, int32_t device, int64_t& record_stream) noexcept {
  DiagScope timing(DiagSite::kOpStream);
  record_stream = db::kUnset;
  try {
    uint32_t dev = 0;
    if (device < 0 && currentDeviceId(dev)) device = static_cast<int32_t>(dev);
    uint32_t id = 0;
    if (g_placement.load(std::memory_order_relaxed) && cuptiStreamId(handle, device, id)) {
      record_stream = cachedStreamId(w, id, device);  // activityStream's key
      return record_stream;
    }
    return cachedStreamId(w, handle, device);
  } catch (...) {
    return db::kUnset;
  }
}

}  // namespace detrace::tracer

// Called by the CUDA driver during cuInit when CUDA_INJECTION64_PATH names this library.
// Returns 1 (success) in every case: a tracer problem must never fail the program's cuInit.
DETRACE_EXPORT int InitializeInjection() {
  try {
    static std::once_flag once;
    std::call_once(once, [] {
      if (detrace::tracer::Session::get().enabled()) {
        (void)detrace::tracer::start();
        // A CUDA process: reachable by `detrace attach` even if paused and CUPTI is unavailable.
        detrace::tracer::startControl();
      }
    });
  } catch (...) {
    detrace::tracer::logLine("could not start the CUDA tracer; the program runs unrecorded");
  }
  return 1;
}
