// The Fingerprinter's internals, shared by its two halves: fingerprinter.cc (digests enqueued on a
// running stream, their results, the flusher's drain) and graph_fingerprints.cc (digests captured
// into CUDA graphs and the results of each replay). Not an interface: see fingerprinter.h.
//
// Locking: State::mu guards everything here but SeqRing and TemplateSeqs, which have leaf mutexes
// of their own (noteSeq() runs under the reorder buffer's lock and must not take State::mu).
// State::drain_mu, taken before mu, makes one thread at a time the drainer: only the drainer
// removes entries from `pending` (and so recycles their events) or forgets a context, so it may
// check the head entries' completion words or query their events, and build the rows of finished
// head entries, without holding mu (Fingerprinter::poll). `awaiting`, `awaiting_bytes`, `written`
// and `lost` are the drainer's alone: drain_mu guards them, mu need not.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <cuda.h>

#include "detrace/db/records.h"
#include "detrace/db/writer.h"
#include "detrace/kernels/digest.h"
#include "detrace/tracer/launch_gate.h"
#include "detrace/tracer/operand_specs.h"
#include "detrace/tracer/reorder_buffer.h"
#include "detrace/tracer/weight_sampling.h"
#include "fingerprinter.h"

namespace detrace::tracer::fp {

// Operand results in flight per context (more in deep mode: many launches per poll), row digests
// in flight (16 MiB pinned), and rows per operand (more: whole digest only).
inline constexpr uint32_t kEntries = 8192;
inline constexpr uint32_t kDeepEntries = 1u << 16;
inline constexpr uint64_t kArenaDigests = 1u << 21;
inline constexpr int64_t kMaxRows = 1 << 16;
// CUDA graphs: device memory for captured ops (each capture's result pointer, and a DigestSlot per
// whole-buffer digest of more than 64 KiB), allocated with the context; the replays' results go to
// a pinned ring allocated at the first instantiation of a graph holding captured digests. A
// destroyed graph's cells and slots come back (State::reclaimCapturesLocked); 8 MiB hold about
// 1,500 live captures of a 32-layer model's decode step (224 weights' slots each), and more of
// vLLM's piecewise ones (about 7 GEMMs a capture).
inline constexpr uint64_t kGraphPoolBytes = uint64_t{8} << 20;
inline constexpr uint64_t kGraphResultsMinBytes = uint64_t{64} << 20;
inline constexpr uint64_t kGraphResultsMaxBytes = uint64_t{1} << 30;
inline constexpr size_t kMaxPendingReplays = 4096;

// Driver entry points, found in the program's libcuda (never linked).
struct Driver {
  using CtxGet = CUresult (*)(CUcontext*);
  using MemAlloc = CUresult (*)(CUdeviceptr*, size_t);
  using MemsetD8Async = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
  using StreamSync = CUresult (*)(CUstream);
  using HostAlloc = CUresult (*)(void**, size_t, unsigned int);
  using HostDevPtr = CUresult (*)(CUdeviceptr*, void*, unsigned int);
  using EventCreate = CUresult (*)(CUevent*, unsigned int);
  using EventRecord = CUresult (*)(CUevent, CUstream);
  using EventQuery = CUresult (*)(CUevent);
  using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  using CopyDtoH = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);
  using CaptureInfo = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                   const CUgraphNode**, const CUgraphEdgeData**, size_t*);
  using StreamWaitEvent = CUresult (*)(CUstream, CUevent, unsigned int);
  using StreamGetCtx = CUresult (*)(CUstream, CUcontext*);
  CtxGet ctx_get = nullptr;
  CtxGet ctx_set = nullptr;  // cuCtxSetCurrent(CUcontext): same shape, by value
  MemAlloc mem_alloc = nullptr;
  MemsetD8Async memset_d8_async = nullptr;  // the result memory's zeroing (ZeroFill)
  StreamSync stream_sync = nullptr;
  HostAlloc host_alloc = nullptr;
  HostDevPtr host_dev_ptr = nullptr;
  EventCreate event_create = nullptr;
  EventRecord event_record = nullptr;
  EventQuery event_query = nullptr;
  IsCapturing is_capturing = nullptr;
  CopyDtoH copy_dtoh = nullptr;        // optional: only full capture needs it
  CaptureInfo capture_info = nullptr;  // optional: only CUDA graphs need these two
  StreamWaitEvent stream_wait_event = nullptr;
  StreamGetCtx stream_get_ctx = nullptr;  // optional: ops on streams of the current context only
  bool ok = false;

  static const Driver& get();
  CUresult setCurrent(CUcontext c) const {
    return reinterpret_cast<CUresult (*)(CUcontext)>(ctx_set)(c);
  }
};

// Makes `ctx` the thread's current context for the scope (where it is not already), and the one
// that was current again at its end. ok(): `ctx` is current.
class ContextScope {
 public:
  explicit ContextScope(CUcontext ctx) {
    const Driver& d = Driver::get();
    if (ctx == nullptr || d.ctx_get(&saved_) != CUDA_SUCCESS) return;
    ok_ = saved_ == ctx || d.setCurrent(ctx) == CUDA_SUCCESS;
    restore_ = ok_ && saved_ != ctx;
  }
  ~ContextScope() {
    if (restore_) (void)Driver::get().setCurrent(saved_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  bool ok() const { return ok_; }

 private:
  CUcontext saved_ = nullptr;
  bool ok_ = false, restore_ = false;
};

// Per-context digest machinery and result memory, created on first use in that context.
struct Context {
  CUcontext ctx = nullptr;
  std::unique_ptr<kernels::Digester> digester;
  uint32_t entries = kEntries;
  kernels::DigestSlot* slots = nullptr;  // device, `entries`, zeroed once (reused by the kernel)
  volatile uint64_t* whole = nullptr;    // mapped host, `entries`
  CUdeviceptr whole_dev = 0;
  volatile uint64_t* arena = nullptr;  // mapped host, kArenaDigests
  CUdeviceptr arena_dev = 0;
  // Completion signals of enqueues (kernels::DoneSignal), one per entry (the enqueue's last one):
  // the kernel's value lands in done[entry], its block counter is done_counters[entry]. Null
  // when they could not be allocated: enqueues then record an event.
  volatile uint64_t* done = nullptr;  // mapped host, `entries`
  CUdeviceptr done_dev = 0;
  CUdeviceptr done_counters = 0;  // device uint32_t, `entries`, zeroed once (left zero)
  uint64_t done_value = 0;        // the last value handed out (values are never reused)
  std::vector<CUevent> free_events;
  uint32_t next_entry = 0, used_entries = 0;
  uint64_t arena_head = 0, arena_used = 0;
  uint8_t* staging = nullptr;  // pinned host memory for full capture (nullptr: none)
  bool staging_tried = false;  // allocateStagingLocked ran (once per context, failed or not)
  uint64_t staging_size = 0, staging_head = 0, staging_used = 0;
  // A driver error left digests or a copy queued whose end cannot be known (their event could
  // not be recorded or queried): they may still write into result entries, arena rows or staging
  // bytes the rings would hand out again. Nothing more is taken from this context's rings; what
  // is in flight already drains as usual.
  bool rings_lost = false;
  // CUDA graphs (graph_fingerprints.cc).
  CUdeviceptr graph_pool = 0;  // device, kGraphPoolBytes, zeroed once: cells and DigestSlots
  uint64_t graph_pool_used = 0;
  // Cells and DigestSlots of reclaimed captures (State::reclaimCapturesLocked), zero again and
  // handed out before the untouched rest of the pool.
  std::vector<CUdeviceptr> free_cells, free_slots;
  bool graph_leaked = false;  // a replay's kernels may still write somewhere: recycle nothing
  int64_t graph_pool_reused = 0;  // cells and slots handed out again
  volatile uint64_t* graph_results = nullptr;  // mapped host ring of replays' digests (words)
  CUdeviceptr graph_results_dev = 0;
  uint64_t graph_words = 0, graph_head = 0, graph_used = 0;
  bool graph_results_tried = false;
  CUdeviceptr diag_device_results = 0;  // DETRACE_DIAG_GRAPH_DEVICE_RESULTS: half the pool
  bool graph_broken = false;  // a replay's results went astray: no more graph fingerprints here
};

// Reserves `n` contiguous units of a FIFO ring of `size` (head, used updated); false if full.
bool reserveRing(uint64_t size, uint64_t& head, uint64_t& used, uint64_t n, uint64_t& off,
                 uint64_t& skip);

// ---- CUDA graphs ----

// An operand of an op captured into a graph: where a replay's digests of it go.
struct CapturedOperand {
  OperandSpec spec;
  uint32_t offset = 0;  // first word in its capture's results
  uint32_t rows = 0;    // row digests (words), or 0: one word, the whole digest
  // A GEMM's weight under --graph-weights-every N > 1: its digest reads its capture's weights
  // cell, set only on sampled replays. The last digest taken (by the drain, under State::mu):
  // which executable graph's replay (Replay::sample) gave it.
  bool sampled = false;
  mutable uint64_t taken_exec = 0;  // ExecInfo::serial (0: none)
  mutable int64_t taken_replay = -1;
  mutable uint64_t taken_digest = 0;
};

struct Capture;

// A library op captured into a graph (its template: the call as recorded at capture).
struct CapturedOp {
  Capture* capture = nullptr;
  uint64_t token = 0;  // the captured call's slot
  LibraryOp op;        // its event and details (NCCL's choices amended in)
  std::vector<CapturedOperand> operands;
  int32_t own_before = 0, own_after = 0;  // digest kernels captured before and after its call
  // Its call's graph nodes and their copies (CUPTI node ids), by which replays find its kernels;
  // by_nodes: its digests all come after its kernels, so nothing else can place it.
  std::vector<uint64_t> node_ids;
  bool by_nodes = false;
  // Its library refused the call after its input digests went into the graph: its replays write
  // no op (its digest nodes still run, and still place the ops after it).
  bool refused = false;
};

struct Replay;

// The order of the launches of the executable graphs that read one set of captures' cells (every
// executable graph made from them shares it). Every launch of them the tracer sees, recorded or
// not, waits on the GPU for the end of the launch before it (that one's graph, and its reset when
// it had results) and marks its own end: a launch's setting of the cells then runs after every
// earlier execution that could read them, and its reset before any later one. CUDA orders the
// graphs' executions themselves, never the tracer's kernels around them.
struct LaunchOrder {
  CUevent done = nullptr;  // recorded at the end of the last launch seen
  bool done_recorded = false;
  // The launch whose cells point at its results (begun, not ended): another thread's launch waits
  // for its end (launch_gate.h).
  LaunchGate<std::shared_ptr<Replay>> gate;
  std::weak_ptr<Replay> last;  // the last launch given results
  // A launch ran, or may have run, unordered (it could not wait long enough for another thread's,
  // or its wait or end could not be issued): from then on no launch of these graphs gets results.
  bool given_up = false;
};

// One stream capture (cuStreamGetCaptureInfo's id) holding captured digests.
struct Capture {
  uint64_t id = 0;
  Context* ctx = nullptr;
  CUgraph graph = nullptr;  // the graph it was captured into
  CUdeviceptr cell = 0;     // device word: where the running replay's results go (0: nowhere)
  CUdeviceptr weights_cell = 0;  // the same for its sampled weights' digests (0: it has none)
  uint32_t words = 0;       // results of one replay
  std::vector<std::unique_ptr<CapturedOp>> ops;  // in call order
  int32_t execs = 0;                             // live executable graphs that contain it
  int32_t graphs = 0;                            // graphs (the one captured into, clones) it is in
  std::vector<CUdeviceptr> slots;                // the pool's DigestSlots its digests use
  int64_t retired_ns = 0;                        // when its last graph and executable graph went
  std::shared_ptr<LaunchOrder> order;            // its executable graphs' (from the first one)
};

// Counts the ExecInfo objects alive, wherever they are held (State::execs, replays queued or
// being drained, a launch between its begin and end): when that is State::execs' size, nothing
// outside the map can reach a capture (reclaimCapturesLocked).
class LiveExecCount {
 public:
  LiveExecCount() { count_.fetch_add(1, std::memory_order_relaxed); }
  LiveExecCount(const LiveExecCount&) : LiveExecCount() {}
  LiveExecCount& operator=(const LiveExecCount&) { return *this; }
  ~LiveExecCount() { count_.fetch_sub(1, std::memory_order_acq_rel); }
  static int64_t now() { return count_.load(std::memory_order_acquire); }

 private:
  static inline std::atomic<int64_t> count_{0};
};

// An executable graph holding captured digests.

struct ExecInfo {
  uint64_t handle = 0;
  Context* ctx = nullptr;
  std::vector<Capture*> captures;
  // Built at the first launch (captures are complete by then): the replayed ops in order, their
  // first word in a replay's results (their capture's offset), and the collectives' communicators.
  std::shared_ptr<const GraphOpTemplates> templates;
  std::vector<const CapturedOp*> ops;
  std::vector<uint32_t> op_base;
  std::vector<uint32_t> capture_base;
  bool seqs_known = false;  // every template's seq was known when `templates` was built
  bool updated = false;     // cuGraphExecUpdate gave it another graph's nodes: not replayed
  uint32_t words = 0;       // the captures' words when it was made (they must not grow after)
  int64_t launches = 0;
  uint64_t serial = 0;          // unique among the process's executable graphs (from 1)
  WeightSampler weights;  // --graph-weights-every: numbers the launches given results, as queued
  std::shared_ptr<LaunchOrder> order;  // never null once noted
  // Orders of other executable graphs whose captures this one also holds (made from several
  // graphs' captures): their last launches' ends are waited for too.
  std::vector<std::shared_ptr<LaunchOrder>> also_after;
  LiveExecCount live;
};

// Why a graph launch's results were given up (State::graph_replays_lost_by; a trace's stats
// `graph_replays_lost_<name>`): the first reason found is kept.
enum class ReplayLoss : uint8_t {
  kNone,          // no reason noted (counted as `other`)
  kLaunchFailed,  // the launch call returned an error: no digests ran
  kExitUnseen,    // its API exit never came; the thread's next launch ended it (abandonReplay)
  kOverlapped,    // another thread's launch may have run unordered against it
  kUnordered,     // a later launch could not be ordered after it
  kUnclosed,      // its cells' reset or its end event could not be queued
  kCellsUnset,    // its cells could not be pointed at its words
  kNoContext,     // its context could not be made current at its end
  kStreamGone,    // its stream may have been destroyed before its end was seen
  kEndTimeout,    // its end was still not seen when the drainer gave up waiting
  kEventError,    // its end event answered an error
  kTeardown,      // its context was torn down before its results could be read
  kCount
};
const char* replayLossName(ReplayLoss why);

// One launch of an executable graph whose replayed ops' digests land in the graph results ring.
struct Replay {
  std::shared_ptr<ExecInfo> exec;
  Context* ctx = nullptr;
  uint64_t first_token = 0;             // op i's token: first_token + i
  int64_t sample = -1;                  // its number among the graph's queued replays (WeightSampler)
  int64_t weights_from = -1;            // the sampled replay (by `sample`) whose weights it gets
  bool weights = true;                  // its sampled weights are digested (--graph-weights-every)
  uint64_t off = 0, skip = 0, len = 0;  // its words in ctx->graph_results (len 0: none reserved)
  CUevent event = nullptr;              // recorded after the launch (endReplay)
  int64_t begun_ns = 0;
  bool ended = false;   // endReplay ran: event recorded, or the launch failed
  bool failed = false;  // no results will come
  bool leak = false;    // its words may still be written: never hand them out again
  bool overlapped = false;  // a launch may have run unordered against it: give its words up
  ReplayLoss loss = ReplayLoss::kNone;  // why `failed` was set (the first reason)

  void fail(ReplayLoss why) {
    failed = true;
    if (loss == ReplayLoss::kNone) loss = why;
  }
};

// One queued result: an operand's digests (eager), or a graph replay's (replay != nullptr).
struct Pending {
  uint64_t token = 0;
  Context* ctx = nullptr;
  OperandSpec spec;
  uint32_t entry = 0;
  uint64_t arena_off = 0, arena_len = 0;     // row digests (arena_len = rows) or 0
  uint64_t arena_skip = 0;                   // arena slots skipped to keep this range contiguous
  uint64_t copy_off = 0, copy_reserved = 0;  // full capture: staging offset, bytes held (+ skip)
  bool copied = false;                       // the copy was queued: write its bytes
  CUevent event = nullptr;  // shared by the operands of one enqueue(); last one owns it
  bool owns_event = false;
  // Or, instead of an event, the enqueue's completion signal: done when *done_word == done_value.
  const volatile uint64_t* done_word = nullptr;
  uint64_t done_value = 0;
  bool done = false;
  bool failed = false;  // no result will come (launch or event failed)
  int64_t seq = db::kUnset;
  std::shared_ptr<Replay> replay;
};

// What SeqRing::get says of a token whose op has no sequence number yet and never will here.
inline constexpr int64_t kSeqForgotten = -3;

// Sequence numbers of written library ops by token (a ring: a result is collected within a poll
// period of its op). Its own leaf mutex: noteSeq() runs under the reorder buffer's lock.
class SeqRing {
 public:
  void put(uint64_t token, int64_t seq) {
    std::lock_guard lk(mu_);
    ring_[token % kSize] = {token, seq};
  }
  // The seq; db::kUnset while not known yet; kSeqForgotten when a later token took its place.
  int64_t get(uint64_t token) {
    std::lock_guard lk(mu_);
    const auto& e = ring_[token % kSize];
    if (e.first == token) return e.second;
    return e.first > token ? kSeqForgotten : db::kUnset;
  }

 private:
  static constexpr size_t kSize = 1 << 16;
  std::mutex mu_;
  std::vector<std::pair<uint64_t, int64_t>> ring_ =
      std::vector<std::pair<uint64_t, int64_t>>(kSize);
};

// Tokens of the ops whose operands are copied (full capture), a ring like SeqRing.
class CopyMarks {
 public:
  void put(uint64_t token) {
    std::lock_guard lk(mu_);
    ring_[token % kSize] = token;
  }
  bool has(uint64_t token) {
    std::lock_guard lk(mu_);
    return ring_[token % kSize] == token;
  }

 private:
  static constexpr size_t kSize = 1 << 12;
  std::mutex mu_;
  std::vector<uint64_t> ring_ = std::vector<uint64_t>(kSize, 0);
};

// Sequence numbers of captured calls (graph templates), kept from noteSeq() until the graph's
// first launch asks (bounded; a leaf mutex like SeqRing's).
class TemplateSeqs {
 public:
  void expect(uint64_t token);
  void put(uint64_t token, int64_t seq);
  int64_t get(uint64_t token);  // db::kUnset if not known (kSeqDropped: not in the trace)

 private:
  static constexpr size_t kMax = 1 << 16;
  std::mutex mu_;
  std::unordered_map<uint64_t, int64_t> seqs_;
  std::deque<uint64_t> order_;
};

// A deep launch's parameters, written once its sequence number is known.
struct PendingParams {
  uint64_t token = 0;
  db::LaunchParams params;
};

class State {
 public:
  std::mutex drain_mu;  // before mu: see the note at the top
  std::mutex mu;
  std::unordered_map<CUcontext, std::unique_ptr<Context>> contexts;
  // Contexts torn down (forgetContext) whose handles have not been created again: a thread that
  // asked for its context before the teardown must not make a Context in the dying one, whose
  // mapped result memory the flusher would read after it is gone. Cleared at kMaxForgotten.
  static constexpr size_t kMaxForgotten = 1024;
  std::unordered_set<CUcontext> forgotten;
  std::deque<Pending> pending;
  std::deque<PendingParams> pending_params;
  size_t pending_params_bytes = 0;
  int64_t params_written = 0, params_lost = 0;
  // Look-back: tokens whose results wait (held) or are thrown away (dropped, a bounded FIFO).
  std::unordered_set<uint64_t> held, dropped;
  std::deque<uint64_t> dropped_order;
  int64_t lookback_dropped = 0;
  // What to do with the head of a queue for `token`: write it, wait, or throw it away.
  enum class Verdict { kWrite, kWait, kDrop };
  Verdict verdictLocked(uint64_t token, bool final) {
    if (held.count(token)) return final ? Verdict::kDrop : Verdict::kWait;
    return dropped.count(token) ? Verdict::kDrop : Verdict::kWrite;
  }
  SeqRing seqs;
  CopyMarks marked;
  TemplateSeqs template_seqs;
  bool disabled = false;
  int64_t skipped_full = 0, skipped_capture = 0, skipped_error = 0, written = 0, lost = 0;
  int64_t skipped_rings_lost = 0, contexts_rings_lost = 0;  // Context::rings_lost
  void loseRingsLocked(Context& cx);  // sets cx.rings_lost, counts and logs it once
  int64_t discarded = 0;  // results of ops that never ran (kSeqDiscarded): not written, not lost
  // A result that will not be written, its op's number being `seq` (kSeqDropped, kSeqForgotten,
  // kSeqDiscarded, or unknown at exit).
  void countUnwritten(int64_t seq) {
    if (seq == kSeqDiscarded) {
      ++discarded;
    } else {
      ++lost;
    }
  }
  int64_t copied_bytes = 0, copies = 0;  // full capture: bytes copied so far (the budget)
  int64_t copy_skipped_budget = 0, copy_skipped_staging = 0, copy_failed = 0;

  // ---- CUDA graphs (graph_fingerprints.cc) ----
  std::unordered_map<uint64_t, std::unique_ptr<Capture>> captures;  // by capture id
  std::unordered_map<CUgraph, std::vector<Capture*>> graph_captures;
  std::unordered_map<uint64_t, std::shared_ptr<ExecInfo>> execs;
  std::unordered_map<uint64_t, CapturedOp*> captured_ops;  // by token, while its call runs
  std::deque<uint64_t> captured_order;                     // bounds captured_ops (oldest first)
  std::unordered_map<uint64_t, CapturedOp*> node_ops;       // a captured op's node ids (and copies')
  size_t pending_replays = 0;
  int64_t graph_ops_captured = 0, graph_operands_captured = 0, graph_replays = 0;
  int64_t graph_ops_refused = 0;  // captured calls their library refused (refuseCaptured)
  int64_t graph_node_ids_dropped = 0;  // node ids past the bounds (their replays placed by count)
  int64_t graph_replays_ring_full = 0, graph_replays_shared = 0, graph_replays_lost = 0;
  std::array<int64_t, static_cast<size_t>(ReplayLoss::kCount)> graph_replays_lost_by{};  // by reason
  void countReplayLost(ReplayLoss why) {
    ++graph_replays_lost;
    ++graph_replays_lost_by[static_cast<size_t>(why)];
  }
  int64_t graph_replays_settled_at_teardown = 0;  // read out as their context was torn down
  int64_t graph_replays_unsupported = 0;
  // Launches that waited for another thread's launch of the same graph to end, and those given no
  // results because a launch ran unordered (LaunchOrder::given_up).
  int64_t graph_replays_waited = 0, graph_replays_overlapped = 0;
  std::condition_variable replay_ended;  // LaunchOrder::gate's waiters (with mu)
  int64_t graph_weights_carried = 0, graph_weights_missing = 0;  // --graph-weights-every
  uint64_t exec_serials = 0;  // ExecInfo::serial's last value
  // Captures whose graphs and executable graphs are all destroyed (by id), reclaimed once
  // nothing can reach them any more; and how many were.
  std::vector<uint64_t> retired;
  int64_t graph_captures_reclaimed = 0;

  Context* contextLocked(CUcontext c);
  bool reserveLocked(Context& cx, int64_t rows, uint32_t& entry, uint64_t& off, uint64_t& skip);
  void releaseHeadLocked();
  void allocateStagingLocked(Context& cx);
  void copyLocked(Context& cx, Pending& p, CUstream stream);
  // Returns true when it stopped because `budget` entries were handled (more may be ready): the
  // flusher then gives the lock up before the next batch, so an enqueue on a program thread waits
  // for at most one batch.
  // `stop_at_ready`: return true (more to do) at the first head entry that collectReadyLocked
  // would take, so that the flusher builds its row without the lock.
  bool drainLocked(bool final, db::TraceWriter* w, size_t budget = SIZE_MAX, bool stop_at_ready = false);
  // The head entries (at most `n`, from the front, stopping at the first that is not one) whose
  // results are in and may be written: not a graph replay's, done, not failed, not held or dropped.
  // That verdict is final: Fingerprinter::hold() comes before its token's digests are enqueued,
  // so a token not held now is never dropped later. Their seq is looked up; those without one
  // must fit in `awaiting` (kMaxAwaitingBytes). The drainer (drain_mu) builds their rows without
  // mu and then releases them (Fingerprinter::poll): only it removes entries, so they stay put
  // and their ring memory stays theirs until then.
  void collectReadyLocked(size_t n, std::vector<const Pending*>& out);
  // Results read out of the rings whose op has no sequence number yet (its slot still waits in
  // the reorder buffer: placement by correlation id holds ops for its hold, ~0.5 s), so that the
  // rings do not fill while they wait; written once the number is known. Bounded in bytes.
  // Guarded by drain_mu: only the drainer touches them, so the flusher writes them without mu.
  struct Awaiting {
    uint64_t token = 0;
    size_t bytes = 0;
    db::Operand operand;
  };
  std::deque<Awaiting> awaiting;
  size_t awaiting_bytes = 0;
  static constexpr size_t kMaxAwaitingBytes = size_t{64} << 20;
  bool awaitLocked(const Pending& p, db::TraceWriter& w);  // false: over the bound
  void parkLocked(Awaiting a) {  // the caller checked the bound
    awaiting_bytes += a.bytes;
    awaiting.push_back(std::move(a));
  }
  static size_t awaitBytes(const Pending& p) {
    return sizeof(Awaiting) + p.arena_len * sizeof(uint64_t) + (p.copied ? p.spec.bytes : 0);
  }
  void drainAwaitingLocked(bool final, db::TraceWriter* w);
  void drainParamsLocked(bool final, db::TraceWriter* w);
  // Queues digests of `specs` (moved into the pending entries); a full ring skips them (`wait`:
  // unlocks `lk` and waits for room). Returns the bytes whose digests were queued.
  int64_t enqueueLocked(std::unique_lock<std::mutex>& lk, uint64_t token, CUcontext ctx,
                        CUstream stream, std::vector<OperandSpec>& specs, bool wait);
  // The bytes of the entries from `first` on whose digests did not fail to be queued.
  int64_t queuedBytesLocked(size_t first) const;

  // Graphs: captures digests of `specs` (inputs: before the op's kernels) into the graph that
  // `stream` is being captured into, and notes the call's graph nodes (`nodes`, if any); false if
  // they cannot be (counted by the caller).
  bool captureLocked(uint64_t token, CUcontext ctx, CUstream stream,
                     const std::vector<OperandSpec>& specs, bool inputs, const CallNodes* nodes);
  // Notes `id` as a node of `op`'s (bounded: beyond the bounds the op keeps the ids it has).
  void addNodeLocked(CapturedOp& op, uint64_t id);
  // A replay whose digests are done (or will never come): writes its operands, if it may.
  enum class ReplayStep { kWritten, kWait };
  ReplayStep drainReplayLocked(Pending& p, bool final, db::TraceWriter* w);
  void writeReplayLocked(const Replay& r, db::TraceWriter* w, bool park);
  void settleReplayForTeardownLocked(Pending& p, db::TraceWriter* w);
  // Replay r's digest of sampled weight `c` (--graph-weights-every): taken at r if r is sampled
  // (and kept), else the one taken at the sampled replay r carries from, if that one gave it;
  // nullopt when there is none. `op_words`: r's results of c's op.
  std::optional<uint64_t> sampledWeightLocked(const CapturedOperand& c, const Replay& r,
                                              const volatile uint64_t* op_words);
  void releaseReplayLocked(Pending& p);
  void forgetGraphsLocked(Context* cx);
  // A capture lost a graph or an executable graph: retired if it has neither left.
  void maybeRetireLocked(Capture& c);
  // Frees the retired captures that nothing can reach any more (no ExecInfo outside `execs`,
  // none in it holding them), their ops' entries in captured_ops and node_ops, and gives their
  // cells and slots back to their context's pool (a second after retirement at the earliest,
  // and never after a replay leaked).
  void reclaimCapturesLocked();
};

State& state();

// The calling thread's last recorded library op (recordLibraryOp() keeps it for the digests that
// follow: a captured call becomes a template with it).
struct LastOp {
  uint64_t token = 0;
  LibraryOp op;
};
LastOp& lastOp();

}  // namespace detrace::tracer::fp
