// See fingerprinter.h. Runs inside the traced program: bounded memory (allocated once per
// context), no host synchronisation on the program's threads, every failure counted, never thrown.
// The CUDA-graph half (captured digests, replays) is graph_fingerprints.cc; both share
// fingerprinter_state.h.
#include "fingerprinter.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <xxhash.h>

#include <time.h>

#include "detrace/tracer/lasting_thread_local.h"
#include "detrace/kernels/digest.h"
#include "commit_thread.h"
#include "diag_timing.h"
#include "env_setting.h"

#include "fingerprinter_state.h"
#include "log.h"
#include "next_symbol.h"
#include "own_stream.h"
#include "relaxed_capture.h"
#include "self_launch.h"
#include "session.h"
#include "signals.h"

namespace detrace::tracer {
namespace fp {
namespace {

constexpr size_t kMaxPendingParams = 1u << 16;  // deep launches' parameters awaiting their seq
constexpr size_t kMaxPendingParamBytes = size_t{64} << 20;
constexpr int kDeepWaitSpins = 3000;            // enqueueDeep(): 3000 x 1 ms at most for room
constexpr int kPollSpinsAtExit = 200;         // finish(): 200 x 10 ms at most

}  // namespace

const Driver& Driver::get() {
  static const Driver d = [] {
    Driver x;
    auto sym = [](const char* n) { return loadedSymbol(n, "libcuda.so"); };
    x.ctx_get = reinterpret_cast<CtxGet>(sym("cuCtxGetCurrent"));
    x.ctx_set = reinterpret_cast<CtxGet>(sym("cuCtxSetCurrent"));
    x.mem_alloc = reinterpret_cast<MemAlloc>(sym("cuMemAlloc_v2"));
    x.memset_d8_async = reinterpret_cast<MemsetD8Async>(sym("cuMemsetD8Async"));
    x.stream_sync = reinterpret_cast<StreamSync>(sym("cuStreamSynchronize"));
    x.host_alloc = reinterpret_cast<HostAlloc>(sym("cuMemHostAlloc"));
    x.host_dev_ptr = reinterpret_cast<HostDevPtr>(sym("cuMemHostGetDevicePointer_v2"));
    x.event_create = reinterpret_cast<EventCreate>(sym("cuEventCreate"));
    x.event_record = reinterpret_cast<EventRecord>(sym("cuEventRecord"));
    x.event_query = reinterpret_cast<EventQuery>(sym("cuEventQuery"));
    x.is_capturing = reinterpret_cast<IsCapturing>(sym("cuStreamIsCapturing"));
    x.copy_dtoh = reinterpret_cast<CopyDtoH>(sym("cuMemcpyDtoHAsync_v2"));
    // CUDA 12.3+ (the edge data argument); older drivers: no graph fingerprints.
    x.capture_info = reinterpret_cast<CaptureInfo>(sym("cuStreamGetCaptureInfo_v3"));
    x.stream_wait_event = reinterpret_cast<StreamWaitEvent>(sym("cuStreamWaitEvent"));
    x.stream_get_ctx = reinterpret_cast<StreamGetCtx>(sym("cuStreamGetCtx"));
    x.ok = x.ctx_get && x.ctx_set && x.mem_alloc && x.memset_d8_async && x.stream_sync &&
           x.host_alloc &&
           x.host_dev_ptr && x.event_create && x.event_record && x.event_query && x.is_capturing;
    return x;
  }();
  return d;
}

// Reserves `n` contiguous units of a FIFO ring of `size` (head, used updated); false if full.
bool reserveRing(uint64_t size, uint64_t& head, uint64_t& used, uint64_t n, uint64_t& off,
                 uint64_t& skip) {
  skip = 0;
  if (used == 0) head = 0;  // empty: the whole ring is free, wherever the head stood
  if (n > size) return false;
  if (head + n > size) skip = size - head;  // wrap: skip the tail
  if (used + skip + n > size) return false;
  off = (head + skip) % size;
  head = (off + n) % size;
  used += skip + n;
  return true;
}

std::atomic<State*> g_state{nullptr};

namespace {
// Whether the results of p's enqueue have landed: its completion signal when it has one (read
// from mapped memory), else a query of its event (p's context must then be current).
CUresult resultsLanded(const Pending& p) {
  if (p.done_word != nullptr) {
    if (*p.done_word != p.done_value) return CUDA_ERROR_NOT_READY;
    std::atomic_thread_fence(std::memory_order_acquire);  // the digests, after the signal
    return CUDA_SUCCESS;
  }
  return Driver::get().event_query(p.event);
}
}  // namespace

// Zeroes the tracer's device memory on the tracer's own stream (own_stream.h: not the legacy
// stream, which would join a blocking stream another thread is capturing), then waits for it.
class ZeroFill {
 public:
  explicit ZeroFill(const Driver& d) : d_(d), stream_(ownStream()) {}
  bool fill(CUdeviceptr p, size_t bytes) {
    return stream_ != nullptr && d_.memset_d8_async(p, 0, bytes, stream_) == CUDA_SUCCESS;
  }
  // Every fill done (before the memory is used on any other stream).
  bool finish() { return stream_ != nullptr && d_.stream_sync(stream_) == CUDA_SUCCESS; }

 private:
  const Driver& d_;
  CUstream stream_;
};

State& state() {
  State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  static std::mutex create_mu;
  std::lock_guard lk(create_mu);
  s = g_state.load(std::memory_order_relaxed);
  if (s == nullptr) {
    s = new State();  // never destroyed: used from exit handlers
    g_state.store(s, std::memory_order_release);
  }
  return *s;
}

Context* State::contextLocked(CUcontext c) {
  if (auto it = contexts.find(c); it != contexts.end()) return it->second.get();
  if (forgotten.contains(c)) return nullptr;  // being torn down: see `forgotten`
  const Driver& d = Driver::get();
  auto cx = std::make_unique<Context>();
  cx->ctx = c;
  // Allocations and synchronous memsets are "unsafe" calls while another thread captures a graph
  // in global mode: refused (fingerprints would be off for the run) or breaking that capture.
  RelaxedCaptureScope relaxed;
  auto digester = kernels::Digester::create();
  if (!digester.isOk()) {
    logLine("fingerprints are off: %s", digester.status().message().c_str());
    disabled = true;
    return nullptr;
  }
  cx->digester = std::make_unique<kernels::Digester>(std::move(*digester));
  CUdeviceptr slots = 0;
  void* whole = nullptr;
  void* arena = nullptr;
  uint32_t entries = Session::get().policy().deep ? kDeepEntries : kEntries;
  cx->entries = entries;
  ZeroFill zero(d);
  bool ok = d.mem_alloc(&slots, sizeof(kernels::DigestSlot) * entries) == CUDA_SUCCESS &&
            zero.fill(slots, sizeof(kernels::DigestSlot) * entries) &&
            d.host_alloc(&whole, sizeof(uint64_t) * entries, CU_MEMHOSTALLOC_DEVICEMAP) ==
                CUDA_SUCCESS &&
            d.host_alloc(&arena, sizeof(uint64_t) * kArenaDigests, CU_MEMHOSTALLOC_DEVICEMAP) ==
                CUDA_SUCCESS &&
            d.host_dev_ptr(&cx->whole_dev, whole, 0) == CUDA_SUCCESS &&
            d.host_dev_ptr(&cx->arena_dev, arena, 0) == CUDA_SUCCESS;
  if (!ok) {
    logLine("fingerprints are off: could not allocate their %zu MiB of result memory",
            static_cast<size_t>((sizeof(uint64_t) * (entries + kArenaDigests)) >> 20));
    disabled = true;
    return nullptr;
  }
  // CUDA graphs: the cells and DigestSlots of captured digests, zeroed once like `slots`; without
  // them this context's graphs get no fingerprints, and the rest works on.
  CUdeviceptr pool = 0;
  if (d.mem_alloc(&pool, kGraphPoolBytes) == CUDA_SUCCESS && zero.fill(pool, kGraphPoolBytes)) {
    cx->graph_pool = pool;
  }
  // Completion signals: without them each enqueue records an event instead (1.1-1.5 us more per
  // GEMM on the H200's decode loop).
  void* done = nullptr;
  CUdeviceptr done_counters = 0;
  if (d.host_alloc(&done, sizeof(uint64_t) * entries, CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS) {
    std::memset(done, 0, sizeof(uint64_t) * entries);
    if (d.host_dev_ptr(&cx->done_dev, done, 0) == CUDA_SUCCESS &&
        d.mem_alloc(&done_counters, sizeof(uint32_t) * entries) == CUDA_SUCCESS &&
        zero.fill(done_counters, sizeof(uint32_t) * entries)) {
      cx->done = static_cast<volatile uint64_t*>(done);
      cx->done_counters = done_counters;
    }
  }
  if (!zero.finish()) {
    logLine("fingerprints are off: could not zero their result memory");
    disabled = true;
    return nullptr;
  }
  cx->slots = reinterpret_cast<kernels::DigestSlot*>(slots);
  cx->whole = static_cast<volatile uint64_t*>(whole);
  cx->arena = static_cast<volatile uint64_t*>(arena);
  if (Session::get().policy().level == CaptureLevel::kFull) allocateStagingLocked(*cx);
  Context* raw = cx.get();
  contexts.emplace(c, std::move(cx));
  return raw;
}

// The staging ring for full capture: pinned, not mapped; min(budget, 256 MiB) unless
// DETRACE_CAPTURE_STAGING_MB says otherwise.
void State::allocateStagingLocked(Context& cx) {
  cx.staging_tried = true;
  const Driver& d = Driver::get();
  RelaxedCaptureScope relaxed;  // another thread may be capturing a graph (contextLocked)
  const int64_t mb = envNumber("DETRACE_CAPTURE_STAGING_MB", 256, 1, 65536);
  uint64_t size =
      std::min<uint64_t>(static_cast<uint64_t>(mb) << 20,
                         static_cast<uint64_t>(Session::get().policy().max_capture_bytes));
  void* host = nullptr;
  if (size == 0 || d.copy_dtoh == nullptr || d.host_alloc(&host, size, 0) != CUDA_SUCCESS) {
    logLine("operand copies are off: could not allocate %llu MiB of pinned staging memory",
            static_cast<unsigned long long>(size >> 20));
    return;
  }
  cx.staging = static_cast<uint8_t*>(host);
  cx.staging_size = size;
}

// Queues a copy of p's whole extent into the staging ring, within the byte budget.
void State::copyLocked(Context& cx, Pending& p, CUstream stream) {
  // A context made before `full` was asked for (attach start --capture full) gets its staging now.
  if (cx.staging == nullptr && !cx.staging_tried) allocateStagingLocked(cx);
  if (cx.staging == nullptr) return;
  uint64_t n = p.spec.bytes;
  if (copied_bytes + static_cast<int64_t>(n) > Session::get().policy().max_capture_bytes) {
    ++copy_skipped_budget;
    return;
  }
  uint64_t off = 0, skip = 0;
  if (!reserveRing(cx.staging_size, cx.staging_head, cx.staging_used, n, off, skip)) {
    ++copy_skipped_staging;
    return;
  }
  p.copy_off = off;
  p.copy_reserved = skip + n;  // released in FIFO order with the entry, copied or not
  if (Driver::get().copy_dtoh(cx.staging + off, p.spec.address, n, stream) != CUDA_SUCCESS) {
    ++copy_failed;
    return;
  }
  p.copied = true;
  copied_bytes += static_cast<int64_t>(n);
  ++copies;
}

// Takes the next result entry and, for rows, a contiguous arena range (FIFO ring buffers).
bool State::reserveLocked(Context& cx, int64_t rows, uint32_t& entry, uint64_t& off,
                          uint64_t& skip) {
  if (cx.used_entries >= cx.entries) return false;
  off = skip = 0;
  uint64_t n = static_cast<uint64_t>(rows);
  if (n > 0 && !reserveRing(kArenaDigests, cx.arena_head, cx.arena_used, n, off, skip))
    return false;
  entry = cx.next_entry;
  cx.next_entry = (cx.next_entry + 1) % cx.entries;
  ++cx.used_entries;
  return true;
}

void State::loseRingsLocked(Context& cx) {
  if (cx.rings_lost) return;
  cx.rings_lost = true;
  ++contexts_rings_lost;
  logLine("fingerprints are off in one CUDA context from here on: a driver error left digests or "
          "copies queued whose end cannot be known, and their memory cannot be handed out again "
          "(fingerprint_contexts_rings_lost)");
}

void State::releaseHeadLocked() {
  Pending& p = pending.front();
  if (p.replay) {
    releaseReplayLocked(p);
    pending.pop_front();
    return;
  }
  Context& cx = *p.ctx;
  --cx.used_entries;
  cx.arena_used -= p.arena_skip + p.arena_len;
  cx.staging_used -= p.copy_reserved;
  // A copy queued ahead of a digest that failed to launch is released without waiting for it:
  // it may still be writing into its staging range. A FIFO ring cannot keep one range out of
  // use (its free space is counted, not mapped), so the context's rings are given up instead.
  if (p.failed && p.copied) loseRingsLocked(cx);
  if (p.owns_event && p.event) cx.free_events.push_back(p.event);
  pending.pop_front();
}

namespace {

db::Operand toOperand(const Pending& p, db::TraceWriter& w) {
  db::Operand o;
  o.seq = p.seq;
  o.slot = p.spec.slot;
  o.name = w.intern(p.spec.name);
  o.role = p.spec.role;
  o.dtype = p.spec.dtype;
  o.shape = p.spec.shape.toVector();
  o.address = static_cast<int64_t>(p.spec.address);
  o.bytes = static_cast<int64_t>(p.spec.bytes);
  o.has_digest = true;
  if (p.arena_len > 0) {
    o.rows = p.spec.rows;
    o.row_bytes = p.spec.row_bytes;
    o.row_stride = p.spec.row_stride;
    o.row_digests.resize(p.arena_len);
    for (uint64_t i = 0; i < p.arena_len; ++i) o.row_digests[i] = p.ctx->arena[p.arena_off + i];
    // Whole digest of an operand with rows: XXH64 of its row digests (little-endian), seed = rows.
    o.digest = XXH64(o.row_digests.data(), o.row_digests.size() * sizeof(uint64_t), p.arena_len);
  } else {
    o.digest = p.ctx->whole[p.entry];
  }
  if (p.copied) {
    const uint8_t* bytes = p.ctx->staging + p.copy_off;
    o.capture.assign(bytes, bytes + p.spec.bytes);
    o.capture_bytes = static_cast<int64_t>(p.spec.bytes);
  }
  return o;
}

}  // namespace

// Writes the deep launches' parameters whose sequence numbers are known, in FIFO order.
void State::drainParamsLocked(bool final, db::TraceWriter* w) {
  while (!pending_params.empty()) {
    PendingParams& p = pending_params.front();
    Verdict v = verdictLocked(p.token, final);
    if (v == Verdict::kWait) return;
    if (v == Verdict::kWrite) {
      if (p.params.seq == db::kUnset) p.params.seq = seqs.get(p.token);
      if (p.params.seq == db::kUnset && !final) return;
      // kSeqDropped: the launch itself was dropped (writer queue full).
      if (p.params.seq >= 0 && w != nullptr && w->appendLaunchParams(p.params)) {
        ++params_written;
      } else {
        ++params_lost;
      }
    }
    pending_params_bytes -= p.params.bytes.size();
    pending_params.pop_front();
  }
}

// A finished result whose op has no sequence number yet: its operand row is built now and waits
// outside the rings (false when that would pass kMaxAwaitingBytes).
bool State::awaitLocked(const Pending& p, db::TraceWriter& w) {
  const size_t bytes = awaitBytes(p);
  if (awaiting_bytes + bytes > kMaxAwaitingBytes) return false;
  parkLocked({p.token, bytes, toOperand(p, w)});
  return true;
}

// Writes the waiting rows whose op has its number now, in FIFO order; at `final`, all of them.
void State::drainAwaitingLocked(bool final, db::TraceWriter* w) {
  while (!awaiting.empty()) {
    Awaiting& a = awaiting.front();
    const int64_t seq = seqs.get(a.token);
    if (seq == db::kUnset && !final) return;
    // kSeqDropped: the op itself was dropped; kSeqForgotten: its number went out of the ring;
    // kSeqDiscarded: it never ran.
    if (seq >= 0 && w != nullptr) {
      a.operand.seq = seq;
      (void)w->appendOperand(a.operand);
      ++written;
    } else {
      countUnwritten(seq);
    }
    awaiting_bytes -= a.bytes;
    awaiting.pop_front();
  }
}

// Writes finished operands in FIFO order; at `final`, gives up on what cannot finish. Runs on the
// flusher thread, or the one finishing at exit: its event queries must not invalidate a graph the
// program is capturing on another thread (relaxed_capture.h).
bool State::drainLocked(bool final, db::TraceWriter* w, size_t budget, bool stop_at_ready) {
  drainParamsLocked(final, w);
  if (!stop_at_ready) drainAwaitingLocked(final, w);  // else the flusher writes them without mu
  if (pending.empty()) return false;  // nothing to query (and no driver at all in CPU-only processes)
  const Driver& d = Driver::get();
  RelaxedCaptureScope relaxed;
  // Event queries need their context current; the caller's (the program's own thread at exit)
  // is given back afterwards.
  CUcontext callers = nullptr;
  if (d.ctx_get(&callers) != CUDA_SUCCESS) callers = nullptr;
  CUcontext current = callers;
  struct Restore {
    const Driver& d;
    const CUcontext& current;
    CUcontext callers;
    ~Restore() {
      if (current != callers) d.setCurrent(callers);
    }
  } restore{d, current, callers};
  auto makeCurrent = [&](CUcontext c) {
    if (current != c) {
      d.setCurrent(c);
      current = c;
    }
  };
  for (size_t handled = 0; !pending.empty(); ++handled) {
    if (handled == budget) return true;
    Pending& p = pending.front();
    if (p.replay) {  // a graph launch's digests (graph_fingerprints.cc)
      makeCurrent(p.ctx->ctx);
      if (drainReplayLocked(p, final, w) == ReplayStep::kWait) return false;
      releaseHeadLocked();
      continue;
    }
    if (p.failed) {  // counted where it failed (fingerprints_skipped_*), not lost again
      releaseHeadLocked();
      continue;
    }
    Verdict verdict = verdictLocked(p.token, final);
    if (verdict == Verdict::kWait) return false;
    if (!p.done) {
      if (p.done_word == nullptr) makeCurrent(p.ctx->ctx);
      CUresult r = resultsLanded(p);
      if (r == CUDA_ERROR_NOT_READY && !final) return false;
      p.done = r == CUDA_SUCCESS;
      if (!p.done) {  // an error or exit: the results will never come
        // An error, not the exit: whether the digests ended is unknown (Context::rings_lost).
        if (!final && r != CUDA_ERROR_NOT_READY) loseRingsLocked(*p.ctx);
        ++lost;
        releaseHeadLocked();
        continue;
      }
    }
    if (stop_at_ready && verdict == Verdict::kWrite) {  // collectReadyLocked takes it
      if (p.seq == db::kUnset) p.seq = seqs.get(p.token);
      if (p.seq != db::kUnset || awaiting_bytes + awaitBytes(p) <= kMaxAwaitingBytes) return true;
    }
    if (verdict == Verdict::kDrop) {  // look-back: its window never opened close enough
      ++lookback_dropped;
      releaseHeadLocked();
      continue;
    }
    // Results may complete before the op's slot is written: read them out of the rings and
    // wait for its sequence number there, or, past that bound, here.
    if (p.seq == db::kUnset) p.seq = seqs.get(p.token);
    if (p.seq == db::kUnset && !final) {
      if (w == nullptr || !awaitLocked(p, *w)) return false;
      releaseHeadLocked();
      continue;
    }
    // kSeqDropped: the op itself was dropped; kSeqForgotten: its number went out of the ring;
    // kSeqDiscarded: it never ran.
    if (p.seq >= 0 && w != nullptr) {
      (void)w->appendOperand(toOperand(p, *w));
      ++written;
    } else {
      countUnwritten(p.seq);
    }
    releaseHeadLocked();
  }
  return false;
}

void State::collectReadyLocked(size_t n, std::vector<const Pending*>& out) {
  out.clear();
  size_t await_bytes = awaiting_bytes;
  for (size_t i = 0; i < pending.size() && out.size() < n; ++i) {
    Pending& p = pending[i];
    if (p.replay || p.failed || !p.done || verdictLocked(p.token, false) != Verdict::kWrite) return;
    if (p.seq == db::kUnset) p.seq = seqs.get(p.token);
    if (p.seq == db::kUnset) {
      await_bytes += awaitBytes(p);
      if (await_bytes > kMaxAwaitingBytes) return;
    }
    out.push_back(&p);
  }
}

}  // namespace fp

using fp::Context;
using fp::Driver;
using fp::Pending;
using fp::State;
using fp::state;

Fingerprinter& Fingerprinter::get() {
  static Fingerprinter f;
  return f;
}

bool Fingerprinter::enabled() const {
  // The level is read each time: `detrace attach ... start --capture` may raise it between starts.
  if (Session::get().policy().level == CaptureLevel::kMeta) return false;
  static const bool driver_ok = [] {
    if (!Driver::get().ok) {
      logLine(
          "fingerprints are off: the CUDA driver's entry points were not found in this process");
    }
    return Driver::get().ok;
  }();
  if (!driver_ok || state().disabled) return false;
  // Without CUPTI (another profiler holds it, or it could not be loaded) no callback says when a
  // context is destroyed, and the results of its digests (pinned memory of that context) would
  // be read after they were freed: a crash of the program after a cudaDeviceReset.
  // DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI=1 takes them anyway: for the CPU tests of the
  // wrappers' digest path, whose fake drivers come without CUPTI.
  static const bool without_cupti = [] {
    const char* v = std::getenv("DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (!without_cupti && !cuptiFlusherRuns()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      logLine("fingerprints are off: CUPTI did not start in this process, and without its "
              "context-teardown callback their results could be read after their CUDA context "
              "is destroyed; NCCL and cuBLAS calls are still recorded");
    }
    return false;
  }
  return true;
}

int64_t fp::State::enqueueLocked(std::unique_lock<std::mutex>& lk, uint64_t token, CUcontext ctx,
                                 CUstream stream, std::vector<OperandSpec>& specs, bool wait) {
  const Driver& d = Driver::get();
  SelfLaunchScope self;  // our kernels, allocations and memsets stay out of the trace
  Context* cx = contextLocked(ctx);
  if (cx == nullptr) {
    if (!disabled) skipped_error += static_cast<int64_t>(specs.size());  // a context torn down
    return 0;
  }
  if (cx->rings_lost) {
    skipped_rings_lost += static_cast<int64_t>(specs.size());
    return 0;
  }
  // Deep window: while the ring cannot take the whole batch, let the flusher write what is done
  // (it polls every 100 ms), under one deadline. Nothing of this batch is queued yet, so nothing
  // refers to the state the unlocked wait lets others change.
  for (int spin = 0; wait && specs.size() <= cx->entries &&
                     cx->used_entries + specs.size() > cx->entries && spin < kDeepWaitSpins;
       ++spin) {
    lk.unlock();
    struct timespec ts {
      0, 1'000'000
    };
    nanosleep(&ts, nullptr);
    lk.lock();
    auto it = contexts.find(ctx);
    if (it == contexts.end() || it->second.get() != cx) return 0;  // the context went away
  }
  // Only --capture full marks ops for copies (a look in the marks takes their lock).
  bool copy = Session::get().policy().level == CaptureLevel::kFull && marked.has(token);
  size_t first = pending.size();
  // The op's digests go out in batches of up to kMaxBatch, one launch each (digestMany): a GEMM's
  // three or four operands cost the host one launch instead of one each. DETRACE_DIAG_DIGEST_MANY=0
  // launches them one by one (for measuring the difference).
  static const bool batched = [] {
    const char* v = std::getenv("DETRACE_DIAG_DIGEST_MANY");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  // DETRACE_DIAG_DIGEST_WORK=empty|none, for measuring what a digest costs (the trace's digests
  // are then wrong or missing): `empty` launches every batch with its requests cut to 0 bytes (the
  // launch and its completion signal, no hashing); `none` launches nothing and records no event
  // (the op's entries fail at once: the bookkeeping alone).
  static const int diag_work = [] {
    const char* v = std::getenv("DETRACE_DIAG_DIGEST_WORK");
    if (v == nullptr) return 0;
    return std::strcmp(v, "empty") == 0 ? 1 : std::strcmp(v, "none") == 0 ? 2 : 0;
  }();
  std::array<kernels::DigestRequest, kernels::Digester::kMaxBatch> batch{};
  uint32_t batch_count = 0;
  size_t batch_first = pending.size();
  // The enqueue's last launch signals its completion when the context has signals: then no
  // event is recorded for it (signalled: true).
  bool signalled = false;
  auto launchBatch = [&](bool last) {
    if (batch_count == 0) return;
    DiagScope launch_timing(DiagSite::kDigestLaunch);
    uint32_t enqueued = 0;
    kernels::DoneSignal done;
    const bool signal = last && cx->done != nullptr;
    if (signal) {
      const uint32_t entry = pending.back().entry;  // this batch's last: its own, unique in flight
      done.flag = reinterpret_cast<volatile uint64_t*>(cx->done_dev + entry * 8ull);
      done.value = ++cx->done_value;
      done.counter = reinterpret_cast<uint32_t*>(cx->done_counters + entry * 4ull);
    }
    const Status st = cx->digester->digestMany(batch.data(), batch_count, stream, &enqueued,
                                               signal ? &done : nullptr);
    if (signal && st.isOk()) {
      signalled = true;
      for (size_t i = first; i < pending.size(); ++i) {
        pending[i].done_word = cx->done + pending.back().entry;
        pending[i].done_value = done.value;
      }
    }
    if (!st.isOk()) {
      // Only the digests that were not enqueued fail now; those that were (a batch of two
      // alignments whose second launch failed) still write their slots, so they keep them until
      // the op's event has passed, as any other (their results are then written as usual).
      for (size_t i = batch_first; i < pending.size(); ++i) {
        if ((enqueued >> (i - batch_first) & 1u) == 0) {
          pending[i].failed = true;
          ++skipped_error;
        }
      }
    }
    batch_count = 0;
    batch_first = pending.size();
  };
  for (OperandSpec& spec : specs) {
    int64_t rows =
        spec.rows > 0 && spec.rows <= kMaxRows &&
                static_cast<uint64_t>(spec.row_bytes) <= kernels::kDigestRowBytesWithoutWorkspace
            ? spec.rows
            : 0;
    Pending p;
    p.token = token;
    p.ctx = cx;
    p.spec = std::move(spec);  // its numbers stay readable in `spec`; the name and shape move
    if (!reserveLocked(*cx, rows, p.entry, p.arena_off, p.arena_skip)) {
      ++skipped_full;
      continue;
    }
    p.arena_len = static_cast<uint64_t>(rows);
    if (copy) copyLocked(*cx, p, stream);
    kernels::DigestRequest req;
    req.base = spec.address;
    if (rows > 0) {
      req.rows = static_cast<uint32_t>(rows);
      req.row_bytes = static_cast<uint64_t>(spec.row_bytes);
      req.row_stride = static_cast<uint64_t>(spec.row_stride);
      req.out = reinterpret_cast<uint64_t*>(cx->arena_dev + p.arena_off * 8);
    } else {
      req.bytes = spec.bytes;
      req.slot = cx->slots + p.entry;
      req.out = reinterpret_cast<uint64_t*>(cx->whole_dev + p.entry * 8ull);
    }
    pending.push_back(std::move(p));
    if (diag_work == 2) {
      pending.back().failed = true;
      ++skipped_error;
      batch_first = pending.size();
      continue;
    }
    if (diag_work == 1) {
      req = kernels::DigestRequest{};
      req.base = spec.address;
      req.slot = cx->slots + pending.back().entry;
      req.out = reinterpret_cast<uint64_t*>(cx->whole_dev + pending.back().entry * 8ull);
    }
    if (!batched) {  // one launch per digest, as before digestMany
      DiagScope launch_timing(DiagSite::kDigestLaunch);
      const Status st = rows > 0 ? cx->digester->digestRows(req.base, req.rows, req.row_bytes,
                                                            req.row_stride, req.out, nullptr, stream)
                                 : cx->digester->digest(req.base, req.bytes, req.slot, stream, req.out);
      if (!st.isOk()) {
        ++skipped_error;
        pending.back().failed = true;
      }
      batch_first = pending.size();
      continue;
    }
    batch[batch_count++] = req;
    if (batch_count == batch.size()) launchBatch(false);
  }
  launchBatch(true);
  if (pending.size() == first || signalled || diag_work == 2) return queuedBytesLocked(first);
  DiagScope event_timing(DiagSite::kFingerprintEvent);
  CUevent ev = nullptr;
  if (!cx->free_events.empty()) {
    ev = cx->free_events.back();
    cx->free_events.pop_back();
  } else if (d.event_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    ev = nullptr;
  }
  if (ev == nullptr || d.event_record(ev, stream) != CUDA_SUCCESS) {
    if (ev != nullptr) cx->free_events.push_back(ev);
    // No way to know when the results land: drop this op's operands from the trace. Those whose
    // digests (or copies) were queued may still write into their ranges: give the rings up.
    bool queued = false;
    for (size_t i = first; i < pending.size(); ++i) {
      queued = queued || !pending[i].failed || pending[i].copied;
      if (!pending[i].failed) ++skipped_error;
      pending[i].failed = true;
    }
    if (queued) loseRingsLocked(*cx);
    return 0;
  }
  for (size_t i = first; i < pending.size(); ++i) pending[i].event = ev;
  pending.back().owns_event = true;
  return queuedBytesLocked(first);
}

int64_t fp::State::queuedBytesLocked(size_t first) const {
  int64_t bytes = 0;
  for (size_t i = first; i < pending.size(); ++i) {
    if (!pending[i].failed) bytes += static_cast<int64_t>(pending[i].spec.bytes);
  }
  return bytes;
}

namespace {

// The context of the stream an op was enqueued on: the thread's current one (`current`), unless
// the stream is a stream of another context, as when one thread drives several GPUs without
// switching (NCCL's group of one communicator per device). The last stream asked about is
// remembered per thread until a stream or a context is destroyed (the handle may come back in
// another context; a context's streams may go with it unannounced).
CUcontext streamContext(const Driver& d, CUcontext current, CUstream stream) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD ||
      d.stream_get_ctx == nullptr) {
    return current;  // the special handles mean the current context's
  }
  thread_local CUstream t_stream = nullptr;
  thread_local uint64_t t_epoch = 0, t_ctx_epoch = 0;
  thread_local CUcontext t_ctx = nullptr;
  const uint64_t epoch = streamEpoch(), ctx_epoch = contextEpoch();
  if (stream == t_stream && epoch == t_epoch && ctx_epoch == t_ctx_epoch) return t_ctx;
  CUcontext ctx = nullptr;
  if (d.stream_get_ctx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) return current;
  t_stream = stream;
  t_epoch = epoch;
  t_ctx_epoch = ctx_epoch;
  t_ctx = ctx;
  return ctx;
}

// `deep`: a deep-window launch (never followed into graphs); else a library op's inputs
// (`inputs`) or outputs. The digests run in the stream's context, made current meanwhile where
// the thread's is another.
int64_t enqueueSpecs(uint64_t token, CUstream stream, std::vector<OperandSpec>& specs, bool wait,
                     bool inputs, bool deep, CUcontext known_uncaptured = nullptr,
                     const CallNodes* nodes = nullptr) {
  const Driver& d = Driver::get();
  State& s = state();
  CUcontext current = known_uncaptured;
  const CUcontext ctx = current != nullptr || d.ctx_get(&current) == CUDA_SUCCESS
                            ? streamContext(d, current, stream)
                            : nullptr;
  if (ctx == nullptr) {  // no context to take them in (none current, and the stream names none)
    std::lock_guard lk(s.mu);
    s.skipped_error += static_cast<int64_t>(specs.size());
    return 0;
  }
  std::optional<fp::ContextScope> switched;
  if (ctx != current && !switched.emplace(ctx).ok()) {
    std::lock_guard lk(s.mu);
    ++s.skipped_error;
    return 0;
  }
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  bool checked = false;
  {
    DiagScope timing(DiagSite::kFingerprintCheck);
    checked = known_uncaptured != nullptr || d.is_capturing(stream, &capture) == CUDA_SUCCESS;
  }
  if (!checked || capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    // Captured into a CUDA graph: the digests are captured with the op and run at every replay.
    std::lock_guard lk(s.mu);
    bool captured = !deep && capture == CU_STREAM_CAPTURE_STATUS_ACTIVE &&
                    s.captureLocked(token, ctx, stream, specs, inputs, nodes);
    if (!captured) ++s.skipped_capture;
    return 0;
  }
  std::unique_lock lk(s.mu, std::defer_lock);
  {
    DiagScope timing(DiagSite::kFingerprintLock);
    lk.lock();
  }
  return s.enqueueLocked(lk, token, ctx, stream, specs, wait);
}

}  // namespace

void Fingerprinter::enqueue(uint64_t token, CUstream stream, std::vector<OperandSpec> specs,
                            bool inputs, CUcontext known_uncaptured,
                            const CallNodes* nodes) noexcept {
  if (token == 0 || specs.empty() || !enabled()) return;
  DiagScope timing(DiagSite::kFingerprint);
  try {
    enqueueSpecs(token, stream, specs, false, inputs, false, known_uncaptured, nodes);
  } catch (...) {
    Session::get().fail("taking fingerprints");
  }
}

int64_t Fingerprinter::enqueueDeep(uint64_t token, CUstream stream,
                                   const std::vector<OperandSpec>& specs) noexcept {
  if (token == 0 || specs.empty() || !enabled()) return 0;
  try {
    std::vector<OperandSpec> copy = specs;
    return enqueueSpecs(token, stream, copy, true, true, true);
  } catch (...) {
    Session::get().fail("taking deep-window fingerprints");
    return 0;
  }
}

void Fingerprinter::attachParams(uint64_t token, std::string layout,
                                 std::vector<uint8_t> bytes) noexcept {
  if (token == 0) return;
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    if (s.pending_params.size() >= fp::kMaxPendingParams ||
        s.pending_params_bytes + bytes.size() > fp::kMaxPendingParamBytes) {
      ++s.params_lost;
      return;
    }
    s.pending_params_bytes += bytes.size();
    fp::PendingParams p;
    p.token = token;
    p.params.layout = std::move(layout);
    p.params.bytes = std::move(bytes);
    s.pending_params.push_back(std::move(p));
  } catch (...) {
  }
}

void fingerprintOperands(uint64_t token, CUstream stream, const std::vector<OperandSpec>& specs,
                         bool inputs, const CallNodes* nodes, CUcontext known_uncaptured) noexcept {
  try {
    if (token == 0 || !Fingerprinter::get().enabled()) return;
    std::vector<OperandSpec> chosen;
    for (const OperandSpec& spec : specs) {
      bool is_in = spec.role != db::OperandRole::kOutput;
      bool is_out = spec.role != db::OperandRole::kInput;
      if (inputs ? is_in : is_out) chosen.push_back(spec);
    }
    Fingerprinter::get().enqueue(token, stream, std::move(chosen), inputs, known_uncaptured, nodes);
  } catch (...) {
  }
}

DigestPlan fingerprintPlan(CUstream stream, const std::vector<OperandSpec>& specs) noexcept {
  DigestPlan plan;
  try {
    static const bool allowed = [] {
      const char* v = std::getenv("DETRACE_DIAG_DIGEST_AFTER");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    if (specs.empty() || !Fingerprinter::get().enabled()) return plan;
    // No context current on this thread (the driver may be loaded but never initialized, or the
    // call is this thread's first CUDA work, whose runtime makes the context current inside the
    // call): no digest can be taken before the call (enqueueSpecs finds no context), and the
    // stream is not asked about. A driver that was never initialized may read the handle as a
    // stream object and crash on it. So every operand is digested after the call, where its
    // outputs leave its inputs as they were; the enqueue then asks for the context first, and
    // for the stream's capture (whose digests after the call need graph node ids).
    const Driver& d = Driver::get();
    CUcontext ctx = nullptr;
    if (d.ctx_get(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
      plan.captured = true;  // the enqueues ask again, context first
      plan.all_after = allowed && !outputsMayChangeInputs(specs) && graphNodeIdsUsable();
      return plan;
    }
    plan.current = ctx;
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    plan.captured = d.is_capturing(stream, &capture) != CUDA_SUCCESS ||
                    capture != CU_STREAM_CAPTURE_STATUS_NONE;
    plan.all_after = allowed && !outputsMayChangeInputs(specs) &&
                     (!plan.captured || (capture == CU_STREAM_CAPTURE_STATUS_ACTIVE && graphNodeIdsUsable()));
  } catch (...) {
    plan = {};
    plan.captured = true;  // unknown: the enqueues ask again
  }
  return plan;
}

void fingerprintAllOperands(uint64_t token, CUstream stream, std::vector<OperandSpec> specs,
                            const DigestPlan& plan, const CallNodes* nodes) noexcept {
  if (token == 0) return;
  // An uncaptured stream (fingerprintPlan asked just before the call) is not asked again; `inputs`
  // only matters to a capture (its digests all come after the op's kernels).
  Fingerprinter::get().enqueue(token, stream, std::move(specs), /*inputs=*/false,
                               plan.knownUncaptured(), nodes);
}

// ---- the graph nodes of a library call (CallNodeScope) ----

namespace {
constexpr size_t kMaxCallNodes = 64;  // a call's kernels beyond these are not told apart
struct CallNodeCollector {
  int depth = 0;
  std::vector<uint64_t> ids;
};
CallNodeCollector& callNodes() {
  struct Tag;
  return lastingThreadLocal<CallNodeCollector, Tag>();
}
std::atomic<bool> g_node_ids_usable{false};
}  // namespace

CallNodeScope::CallNodeScope() : outer_(callNodes().depth++ == 0) {
  if (outer_) callNodes().ids.clear();
}
CallNodeScope::~CallNodeScope() { --callNodes().depth; }

std::vector<uint64_t> CallNodeScope::take() noexcept {
  if (!outer_) return {};
  return std::exchange(callNodes().ids, {});
}

bool CallNodeScope::open() noexcept { return callNodes().depth > 0; }

void CallNodeScope::note(uint64_t node_id) noexcept {
  CallNodeCollector& c = callNodes();
  if (c.depth == 0 || c.ids.size() >= kMaxCallNodes) return;
  try {
    c.ids.push_back(node_id);
  } catch (...) {
  }
}

void setGraphNodeIdsUsable(bool usable) noexcept { g_node_ids_usable.store(usable); }
bool graphNodeIdsUsable() noexcept { return g_node_ids_usable.load(std::memory_order_relaxed); }

namespace {
thread_local int64_t t_last_row_bytes = 0;
}  // namespace

int64_t lastGemmRowBytes() { return t_last_row_bytes; }
void setLastGemmRowBytes(int64_t bytes) { t_last_row_bytes = bytes; }

namespace {

// One of a dying context's entries, whose results must be read now, while their memory lives:
// written, parked in `awaiting` until its op is placed (placement by correlation id holds ops for
// ~0.5 s), or counted lost. Look-back verdicts are final here, as at exit (drainLocked): a held
// token cannot wait for its window any more and is dropped. Never throws (an entry left
// half-handled would be read after the context is gone). Under drain_mu and mu.
void settleForTeardownLocked(State& s, Pending& p, db::TraceWriter* w) noexcept {
  if (p.failed) return;  // counted where it failed (fingerprints_skipped_*)
  try {
    if (!p.done) p.done = fp::resultsLanded(p) == CUDA_SUCCESS;
    if (p.seq == db::kUnset) p.seq = s.seqs.get(p.token);
    if (s.verdictLocked(p.token, /*final=*/true) == State::Verdict::kDrop) {
      ++s.lookback_dropped;
    } else if (!p.done || w == nullptr) {
      ++s.lost;
    } else if (p.seq >= 0) {
      (void)w->appendOperand(fp::toOperand(p, *w));
      ++s.written;
    } else if (p.seq != db::kUnset || !s.awaitLocked(p, *w)) {  // kSeqDropped, ...Forgotten, ...Discarded, full
      s.countUnwritten(p.seq);
    }
  } catch (...) {
    ++s.lost;
  }
}

}  // namespace

void Fingerprinter::forgetContext(CUcontext ctx) noexcept {
  try {
    State& s = state();
    db::TraceWriter* w = Session::get().startedWriter();
    // No event query of this context's is running unlocked. The drainer holds drain_mu across
    // driver calls on this context; waiting for it here, inside the driver's teardown, would hang
    // if the driver made those calls wait for the teardown. It does not (bench/tracer/
    // cupti_teardown_probe, H100, driver 580: cuCtxSetCurrent and cuEventQuery on the dying
    // context, and allocations and launches in another, return within 3 ms inside the callback).
    std::lock_guard drain(s.drain_mu);
    std::lock_guard lk(s.mu);
    if (s.forgotten.size() >= State::kMaxForgotten) s.forgotten.clear();
    s.forgotten.insert(ctx);  // also where it has no Context yet: none is made in it from now on
    auto it = s.contexts.find(ctx);
    if (it == s.contexts.end()) return;
    Context* cx = it->second.get();
    {
      RelaxedCaptureScope relaxed;  // the program's own thread: its mode is given back below
      for (Pending& p : s.pending) {
        if (p.ctx != cx) continue;
        if (p.replay) {  // a graph launch's digests: its result memory goes with the context
          --s.pending_replays;
          try {
            s.settleReplayForTeardownLocked(p, w);
          } catch (...) {
            s.countReplayLost(fp::ReplayLoss::kTeardown);
          }
          continue;
        }
        settleForTeardownLocked(s, p, w);
      }
    }
    std::erase_if(s.pending, [cx](const Pending& p) { return p.ctx == cx; });
    s.forgetGraphsLocked(cx);
    // Its memory and module die with the context: leak the bookkeeping, never touch them again.
    (void)it->second.release();
    s.contexts.erase(it);
  } catch (...) {
  }
}

void Fingerprinter::noteContextCreated(CUcontext ctx) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    s.forgotten.erase(ctx);
  } catch (...) {
  }
}

void Fingerprinter::resetAfterFork() noexcept {
  try {
    fp::g_state.store(new State(), std::memory_order_release);  // the parent's is leaked on purpose
  } catch (...) {
  }
}

void Fingerprinter::hold(uint64_t token) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    s.held.insert(token);
  } catch (...) {
  }
}

void Fingerprinter::releaseHeld(uint64_t token) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    s.held.erase(token);
  } catch (...) {
  }
}

void Fingerprinter::dropHeld(uint64_t token) noexcept {
  constexpr size_t kMaxDropped = 4096;
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    s.held.erase(token);
    if (s.dropped.insert(token).second) s.dropped_order.push_back(token);
    if (s.dropped_order.size() > kMaxDropped) {
      s.dropped.erase(s.dropped_order.front());
      s.dropped_order.pop_front();
    }
  } catch (...) {
  }
}

void Fingerprinter::markCopy(uint64_t token) noexcept {
  try {
    if (token != 0) state().marked.put(token);
  } catch (...) {
  }
}

void Fingerprinter::noteSeq(uint64_t token, int64_t seq) noexcept {
  try {
    State& s = state();
    s.seqs.put(token, seq);
    s.template_seqs.put(token, seq);
  } catch (...) {
  }
}

namespace {

// Marks those of the first `n` pending entries whose results have landed: by their completion
// word where they have one (read under State::mu: a load from mapped memory), else by asking the
// driver, without holding State::mu, whether their event has passed. The drain that follows then
// only takes them (writeReady builds and writes their rows without the lock too). Program threads
// enqueueing digests wait for State::mu; before, they waited for the event queries too (H200,
// decode loop: 3.45 us per enqueue). The caller holds drain_mu, so the entries and their events
// stay as they are until it drains them.
void queryHeadEvents(State& s, size_t n) {
  struct Query {
    CUcontext ctx;
    CUevent event;
  };
  std::vector<Query> queries;
  {
    std::lock_guard lk(s.mu);
    const size_t end = std::min(n, s.pending.size());
    queries.reserve(end);
    for (size_t i = 0; i < end; ++i) {
      Pending& p = s.pending[i];
      if (p.replay || p.failed || p.done) continue;
      if (p.done_word != nullptr) {  // a read of mapped memory: no driver call, no context
        p.done = fp::resultsLanded(p) == CUDA_SUCCESS;
        continue;
      }
      if (p.event == nullptr) continue;
      // The operands of one enqueue share their event: ask once.
      if (queries.empty() || queries.back().event != p.event) queries.push_back({p.ctx->ctx, p.event});
    }
  }
  if (queries.empty()) return;
  const Driver& d = Driver::get();
  std::vector<CUevent> passed;
  {
    RelaxedCaptureScope relaxed;  // never invalidate a graph the program is capturing
    CUcontext callers = nullptr;
    if (d.ctx_get(&callers) != CUDA_SUCCESS) callers = nullptr;
    CUcontext current = callers;
    for (const Query& q : queries) {
      if (current != q.ctx) {
        d.setCurrent(q.ctx);
        current = q.ctx;
      }
      if (d.event_query(q.event) == CUDA_SUCCESS) passed.push_back(q.event);
    }
    if (current != callers) d.setCurrent(callers);
  }
  if (passed.empty()) return;
  std::lock_guard lk(s.mu);
  const size_t end = std::min(n, s.pending.size());
  for (size_t i = 0; i < end; ++i) {
    Pending& p = s.pending[i];
    if (p.replay || p.failed || p.done || p.event == nullptr) continue;
    if (std::find(passed.begin(), passed.end(), p.event) != passed.end()) p.done = true;
  }
}

// Builds the rows of `ready` (collectReadyLocked's) without State::mu, then, under it, releases
// their entries and parks the rows whose op has no sequence number yet in `awaiting`. Building a
// row (reading its digests out of the ring, hashing row digests, interning the name, handing it
// to the writer) under the lock made program threads wait for it: 3.1 us per enqueue on the H200
// (decode loop, 2026-12-01).
void writeReady(State& s, const std::vector<const Pending*>& ready, db::TraceWriter& w) {
  std::vector<State::Awaiting> parked;
  int64_t written = 0, lost = 0, discarded = 0;
  for (const Pending* p : ready) {
    const int64_t seq = p->seq != db::kUnset ? p->seq : s.seqs.get(p->token);
    if (seq == db::kUnset) {
      parked.push_back({p->token, State::awaitBytes(*p), fp::toOperand(*p, w)});
    } else if (seq >= 0) {  // kSeqDropped: the op was dropped; kSeqForgotten: out of the ring
      // DETRACE_DIAG_FP_DISCARD=1 builds the row and drops it (for measuring the writer's share).
      static const bool discard = [] {
        const char* v = std::getenv("DETRACE_DIAG_FP_DISCARD");
        return v != nullptr && std::strcmp(v, "1") == 0;
      }();
      db::Operand o = fp::toOperand(*p, w);
      o.seq = seq;
      if (!discard) (void)w.appendOperand(o);
      ++written;
    } else {
      ++(seq == kSeqDiscarded ? discarded : lost);
    }
  }
  std::lock_guard lk(s.mu);
  for (size_t i = 0; i < ready.size(); ++i) s.releaseHeadLocked();
  s.written += written;
  s.lost += lost;
  s.discarded += discarded;
  for (State::Awaiting& a : parked) s.parkLocked(std::move(a));
}

}  // namespace

void Fingerprinter::poll() noexcept {
  DiagScope timing(DiagSite::kFingerprintPoll);
  try {
    State& s = state();
    // startedWriter(): results of ops recorded before an `attach stop` still land while paused.
    db::TraceWriter* w = Session::get().startedWriter();
    std::lock_guard drain(s.drain_mu);
    // In batches, each under its own short lock hold, with a yield between them (a mutex does not
    // hand itself to a waiter): the program's threads enqueue under the same lock (measured on the
    // H200: 9.3 us per op waiting for it while the drain held it throughout). Finished results
    // are written without the lock (writeReady); the lock hold only decides what to do with the
    // head entries. At most about what was pending when the poll began, so that a steady stream
    // of finished ops cannot keep it here.
    constexpr size_t kBatch = 32;
    size_t budget = 0;
    {
      std::lock_guard lk(s.mu);
      budget = s.pending.size() + s.pending_params.size();
      s.reclaimCapturesLocked();  // destroyed graphs' captures, once their replays are drained
    }
    std::vector<const Pending*> ready;
    ready.reserve(kBatch);
    for (size_t round = 0; round <= 2 * (budget / kBatch + 1); ++round) {
      if (w != nullptr) s.drainAwaitingLocked(false, w);  // drain_mu guards `awaiting`
      queryHeadEvents(s, kBatch);
      bool more = false;
      {
        std::lock_guard lk(s.mu);
        if (w != nullptr) s.collectReadyLocked(kBatch, ready);
        // Nothing ready at the head: what is there (failed entries, look-back verdicts, graph
        // replays, events not passed yet) is handled under the lock, up to the next ready one.
        more = !ready.empty() || s.drainLocked(false, w, kBatch, /*stop_at_ready=*/w != nullptr);
      }
      if (!ready.empty()) writeReady(s, ready, *w);
      if (!more) break;
      std::this_thread::yield();
    }
  } catch (...) {
  }
}

void Fingerprinter::finish(db::TraceWriter* w) noexcept {
  try {
    State& s = state();
    std::lock_guard drain(s.drain_mu);
    for (int i = 0; i < fp::kPollSpinsAtExit; ++i) {
      if (finishAbandoned()) return;  // the process is tearing CUDA down: no more event queries
      {
        std::lock_guard lk(s.mu);
        s.drainLocked(false, w);
        if (s.pending.empty()) break;
      }
      struct timespec ts {
        0, 10'000'000
      };
      nanosleep(&ts, nullptr);
    }
    if (finishAbandoned()) return;
    std::lock_guard lk(s.mu);
    s.drainLocked(true, w);  // the counters follow (Session::finish, publishStats)
  } catch (...) {
  }
}

// The fingerprinter's counters, as totals: copied under its lock, written after it (setStat takes
// the writer's lock; the program's threads wait for this one).
void Fingerprinter::publishStats(db::TraceWriter& w) noexcept {
  try {
    std::vector<std::pair<std::string, int64_t>> stats;
    stats.reserve(48);  // allocated before the lock
    {
      State& s = state();
      std::lock_guard lk(s.mu);
      auto put = [&stats](std::string key, int64_t value) { stats.emplace_back(std::move(key), value); };
      put("fingerprints_written", s.written);
      put("fingerprints_lost", s.lost);
      if (s.discarded > 0) put("fingerprints_of_discarded_ops", s.discarded);
      put("fingerprints_skipped_ring_full", s.skipped_full);
      put("fingerprints_skipped_graph_capture", s.skipped_capture);
      put("fingerprints_skipped_error", s.skipped_error);
      if (s.contexts_rings_lost > 0) {
        put("fingerprint_contexts_rings_lost", s.contexts_rings_lost);
        put("fingerprints_skipped_rings_lost", s.skipped_rings_lost);
      }
      if (s.graph_ops_captured > 0 || s.graph_replays > 0) {
        put("graph_fingerprint_ops_captured", s.graph_ops_captured);
        put("graph_fingerprint_operands_captured", s.graph_operands_captured);
        put("graph_fingerprint_ops_refused", s.graph_ops_refused);
        put("graph_node_ids_dropped", s.graph_node_ids_dropped);
        put("graph_replays_fingerprinted", s.graph_replays);
        put("graph_replays_skipped_ring_full", s.graph_replays_ring_full);
        put("graph_replays_skipped_shared", s.graph_replays_shared);
        put("graph_replays_skipped_unsupported", s.graph_replays_unsupported);
        put("graph_replays_lost", s.graph_replays_lost);
        for (size_t i = 0; i < s.graph_replays_lost_by.size(); ++i) {  // why, where any was
          if (s.graph_replays_lost_by[i] == 0) continue;
          put(std::string("graph_replays_lost_") + fp::replayLossName(static_cast<fp::ReplayLoss>(i)),
                  s.graph_replays_lost_by[i]);
        }
        put("graph_replays_settled_at_teardown", s.graph_replays_settled_at_teardown);
        put("graph_replays_waited", s.graph_replays_waited);
        put("graph_replays_skipped_overlap", s.graph_replays_overlapped);
        put("graph_captures_reclaimed", s.graph_captures_reclaimed);
        int64_t reused = 0;  // of the contexts still alive
        for (const auto& [ctx, cx] : s.contexts) reused += cx->graph_pool_reused;
        put("graph_pool_reused", reused);
        if (Session::get().policy().graph_weights_every > 1) {
          put("graph_weight_digests_carried", s.graph_weights_carried);
          put("graph_weight_digests_missing", s.graph_weights_missing);
        }
      }
      if (Session::get().policy().deep) {
        put("deep_params_written", s.params_written);
        put("deep_params_lost", s.params_lost);
        put("deep_lookback_fingerprints_dropped", s.lookback_dropped);
      }
      if (Session::get().policy().level == CaptureLevel::kFull) {
        put("captures_written", s.copies);
        put("captured_bytes", s.copied_bytes);
        put("captures_skipped_budget", s.copy_skipped_budget);
        put("captures_skipped_staging_full", s.copy_skipped_staging);
        put("captures_failed", s.copy_failed);
      }
    }
    for (const auto& [key, value] : stats) w.setStat(key, value);
  } catch (...) {
  }
}

}  // namespace detrace::tracer
