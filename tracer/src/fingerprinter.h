// Fingerprinter: takes GPU digests of library-op operands inside the traced program, stream-ordered
// and without ever making the program's streams wait on the host.
//
// For an op, enqueue() launches digest kernels on the op's own stream (inputs before the op's
// kernels and outputs after them, or all after them where the call cannot change its inputs), writing into mapped host memory; the last launch's last block
// then stores a completion number to a mapped word (kernels::DoneSignal), or, where that cannot be
// used, a CUDA event is recorded behind them. The tracer's flusher thread calls poll(), which
// turns finished results into operand rows once the op's sequence number is known (noteSeq(), from
// the reorder buffer). Memory is allocated once per CUDA context: a ring of kEntries results and
// an arena of row digests. When the ring is full the op simply gets no fingerprints, and the skip
// is counted.
//
// CUDA graphs (graph_fingerprints.cc). An op called while its stream is being captured into a
// graph runs only when the graph is launched, as often as it is launched. So its digest kernels
// are captured with it, in the *Via form: each reads, when it runs, where its results go from a
// device word of its capture (0: nowhere); a GEMM's all in one node after its kernels, whose graph
// nodes (and their copies) place it at replay, other ops' inputs before and outputs after. The
// call is recorded once, at capture, as the op's template. At every graph launch the tracer sees, on the launching thread: the reorder buffer
// takes a slot for each op the graph replays (written among the launch's kernels, with the
// template's details), the op results of the launch get a contiguous range of a pinned ring, one
// small kernel stores that range into the capture's word on the launch's stream before the graph,
// and after it another stores 0 and an event marks the end. The flusher writes each replayed op's
// operands once the event has passed and the op has its sequence number. No atomics on the GPU,
// no waits on the GPU; a full ring, a graph instantiated twice or an unknown capture leaves the
// word 0: the replay's digest kernels return at once and the replay's ops have no fingerprints
// (counted). Every launch the tracer sees, recorded or not, is ordered on the GPU after the last
// recorded one's reset; a launch from another thread while one is between its begin and end
// waits for that end (at most 50 ms, graph_fingerprints.cc: orderLaunchLocked).
//
// In full capture mode the operands of ops marked with markCopy() are also copied with
// cuMemcpyDtoHAsync into a pinned staging ring (allocated once per context, at most
// --max-capture-bytes and 256 MiB unless DETRACE_CAPTURE_STAGING_MB says otherwise); an operand that
// does not fit now, or past the byte budget, keeps its fingerprints only, and is counted.
//
// Operands with rows get per-row digests on the GPU; their whole digest is then the digest of the
// row digests (docs/digest.md), so each operand's bytes are read once.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "detrace/db/writer.h"
#include "detrace/tracer/operand_specs.h"
#include "detrace/tracer/reorder_buffer.h"

namespace detrace::tracer {

namespace fp {
struct ExecInfo;
}  // namespace fp

// The graph nodes (CUPTI's node ids) a library call created on its thread while its stream was
// being captured: at replay, the records of those nodes (and of their copies in executable graphs)
// are the op's kernels, whatever else the graph runs around them. `all_after`: the op's digests
// all come after its kernels (none before them), so only its nodes can place it.
struct CallNodes {
  std::vector<uint64_t> ids;
  bool all_after = false;
};

// Collects the nodes the calling thread creates from open to close (the GRAPHNODE_CREATED
// callback calls note); nested opens are one. Never throws.
class CallNodeScope {
 public:
  CallNodeScope();
  ~CallNodeScope();
  CallNodeScope(const CallNodeScope&) = delete;
  CallNodeScope& operator=(const CallNodeScope&) = delete;
  // The nodes created since the scope opened (empty for a nested scope).
  std::vector<uint64_t> take() noexcept;
  // Whether a scope is open on this thread (the callback asks CUPTI for a node's id only then).
  static bool open() noexcept;
  static void note(uint64_t node_id) noexcept;

 private:
  bool outer_ = false;
};

// Whether the replayed records' node ids can be told apart (CUPTI gives node ids and reports node
// copies): set once by the CUPTI adapter. Without it, captured ops keep a digest before their
// kernels to be placed by.
void setGraphNodeIdsUsable(bool usable) noexcept;
bool graphNodeIdsUsable() noexcept;

// How many streams were destroyed so far (cupti_adapter.cc; a stream's handle may come back).
uint64_t streamEpoch() noexcept;
// Counts CUDA context teardowns (cupti_adapter.cc): a context handle may come back as another.
uint64_t contextEpoch() noexcept;

class Fingerprinter {
 public:
  static Fingerprinter& get();
  // False when DETRACE_DIGEST=0 or the digest kernels cannot run (no driver, old GPU).
  bool enabled() const;
  // Enqueues digests of `specs` on `stream` for op `token`, its inputs (taken before its kernels)
  // or outputs; on a stream being captured into a CUDA graph, captures them. `known_uncaptured`
  // (non-null): the caller has just asked the driver, this is the thread's current context and
  // `stream` is not being captured (each question costs a GEMM's thread about 0.2 us on the H200,
  // so neither is asked twice). Never blocks; never throws.
  // `nodes`: the graph nodes the op's call created while its stream was captured (see CallNodes).
  void enqueue(uint64_t token, CUstream stream, std::vector<OperandSpec> specs, bool inputs = true,
               CUcontext known_uncaptured = nullptr, const CallNodes* nodes = nullptr) noexcept;
  // Deep window: like enqueue(), but when the result ring is full it waits (bounded, ~3 s) for
  // room instead of skipping: inside the window, completeness matters more than the launch's cost.
  // Returns the bytes whose digests were queued (0 when none was: fingerprints off, a full ring,
  // an error).
  int64_t enqueueDeep(uint64_t token, CUstream stream,
                      const std::vector<OperandSpec>& specs) noexcept;
  // Deep window: the parameter layout (launch_params.h layoutText) and bytes of launch `token`,
  // written with its sequence number once it is known.
  void attachParams(uint64_t token, std::string layout, std::vector<uint8_t> bytes) noexcept;
  // Deep window look-back (kernel:NAME@N-B): the results of launch `token` wait, unwritten, until
  // releaseHeld() (the window opened close enough after it) or dropHeld() (it did not). At exit,
  // what is still held is dropped.
  void hold(uint64_t token) noexcept;
  void releaseHeld(uint64_t token) noexcept;
  void dropHeld(uint64_t token) noexcept;
  // Full capture: the operands of op `token` are also copied (to pinned host memory, on the op's
  // stream, within --max-capture-bytes) and written with their fingerprints.
  void markCopy(uint64_t token) noexcept;
  // The op `token` was written with sequence number `seq`.
  void noteSeq(uint64_t token, int64_t seq) noexcept;
  // Writes the operands whose digests are done and whose op has a sequence number.
  void poll() noexcept;
  // The CUDA context `ctx` is being destroyed (its memory goes with it): writes its finished
  // results that can be written now, drops the rest (counted as lost) and forgets the context.
  void forgetContext(CUcontext ctx) noexcept;
  // A CUDA context was created (its handle may be one forgotten before): digests may use it.
  void noteContextCreated(CUcontext ctx) noexcept;

  // ---- CUDA graphs (graph_fingerprints.cc) ----
  // The calling thread's library op is being recorded (recordLibraryOp): kept, so that a
  // captured call's digests can make it a template. noteOp copies it before it is published, when
  // its token is not known yet; noteOpToken gives it its token once it is.
  static void noteOp(const LibraryOp& op) noexcept;
  static void noteOpToken(uint64_t token) noexcept;
  // NCCL reported its choices for call `token` after its digests were captured: the template
  // gets them too.
  void amendCaptured(uint64_t token, const std::function<void(LibraryOp&)>& update) noexcept;
  // A call captured into a graph that its library then refused (nothing of it but the input
  // digests taken before it is in the graph): its replays write no op. No-op for other calls.
  void refuseCaptured(uint64_t token) noexcept;
  // CUPTI resource callbacks: a graph was cloned (its captures come along); an executable graph
  // was made in `ctx` from `graphs` (the graph and every child graph in it); an executable graph
  // or a graph is about to be destroyed.
  void noteGraphCloned(CUgraph original, CUgraph clone) noexcept;
  // A graph node was copied (into an executable graph at instantiation, or into a cloned or parent
  // graph): if the original is a captured op's node, so is the copy (graph node ids, CUPTI's).
  void noteNodeCloned(uint64_t original, uint64_t copy) noexcept;
  void noteExec(uint64_t exec, CUcontext ctx, const std::vector<CUgraph>& graphs) noexcept;
  // cuGraphExecUpdate(exec, graph) is about to give `exec` the nodes of `graph`: its launches are
  // no longer followed, and `graph`'s captures count it among their executable graphs.
  void noteExecUpdated(uint64_t exec, CUgraph graph) noexcept;
  // A node of `exec` was disabled (cuGraphNodeSetEnabled): it may be a captured op's kernel, whose
  // replays would then be written with digests of outputs it never made, so the launches of `exec`
  // are no longer followed (true if it held captured ops).
  bool noteExecNodeDisabled(uint64_t exec) noexcept;
  void forgetExec(uint64_t exec) noexcept;
  void forgetGraph(CUgraph graph) noexcept;
  // A launch of executable graph `exec`, at its API entry on the launching thread: planReplay()
  // says what the graph replays (false: nothing recorded), for the reorder buffer; then
  // beginReplay() with the launch's slot token points the replay's digests at its results on
  // `stream` (before the graph), and endReplay() at the API's exit marks their end (after it).
  struct ReplayPlan {
    std::shared_ptr<const GraphOpTemplates> ops;
    std::vector<int64_t> comm_seqs;  // per op: a collective's number for this launch
    int64_t replay = -1;             // the executable graph's launch number
    std::shared_ptr<fp::ExecInfo> exec;
  };
  // (beginReplay with token 0: the launch is not in the trace, but is ordered like the others.)
  bool planReplay(uint64_t exec, ReplayPlan& plan) noexcept;
  void beginReplay(const ReplayPlan& plan, CUstream stream, uint64_t token) noexcept;
  void endReplay(bool failed) noexcept;
  // A launch of `exec` on `stream` that gets no results (paused, outside --window, or its graph
  // gets none): its graph's captured digests still read their cells, so it is ordered after the
  // launch before it (and waits, bounded, for another thread's launch in progress) as one with
  // results is. True when it was: its exit must then call endReplay, which marks its end.
  bool orderUnrecordedLaunch(uint64_t exec, CUstream stream) noexcept;
  // Whether some executable graph holds captured digests (then every launch of one is ordered).
  static bool ordersGraphLaunches() noexcept;
  // The calling thread's last graph launch saw no endReplay (its API exit was lost to a capture
  // stop): called at its next one, after that call returned, it ends that launch as its exit
  // would have, giving its results up.
  void abandonReplay() noexcept;

  // After fork(), in the child: the parent's state (pinned memory, held locks) is unusable here.
  static void resetAfterFork() noexcept;
  // At exit, after the reorder buffer's flush: waits (bounded) for outstanding digests and writes
  // them to `writer` (the counters: publishStats).
  void finish(db::TraceWriter* writer) noexcept;
  // Sets the fingerprint counters in `writer`'s stats (totals: Session::publishStats, every second
  // and at finish).
  void publishStats(db::TraceWriter& writer) noexcept;

 private:
  void endLaunch(bool failed, bool abandoned) noexcept;  // endReplay and abandonReplay
  Fingerprinter() = default;
};

// Enqueues the input (inputs = true) or output operands of `specs` for op `token` on `stream`.
// `known_uncaptured`: as for Fingerprinter::enqueue.
void fingerprintOperands(uint64_t token, CUstream stream, const std::vector<OperandSpec>& specs,
                         bool inputs, const CallNodes* nodes = nullptr,
                         CUcontext known_uncaptured = nullptr) noexcept;

// How a GEMM's operands are fingerprinted around its call (fingerprintPlan, asked just before it).
// All after: every operand after the call, in one enqueue (one digest launch, one completion
// signal, one lock instead of two of each); the inputs' digests then read them after the op's
// kernels, in stream order, where they still hold what the op read. That needs fingerprints on and
// a call that cannot change what its inputs hold (outputsMayChangeInputs); on a stream being
// captured into a CUDA graph it also needs the graph node ids (graphNodeIdsUsable), by which the
// op's replayed kernels are found instead of between its digests (graph_fingerprints.cc).
// DETRACE_DIAG_DIGEST_AFTER=0 says no (inputs before the call, as before; for measuring it).
struct DigestPlan {
  bool all_after = false;
  bool captured = false;  // the stream is being captured (or its status is unknown)
  // The thread's context when asked. The enqueues after the call take it as still current: the
  // libraries whose calls are planned (cuBLAS, cuBLASLt) never change the caller's context.
  CUcontext current = nullptr;
  // What the enqueues around the call need not ask again (Fingerprinter::enqueue).
  CUcontext knownUncaptured() const { return captured ? nullptr : current; }
};
DigestPlan fingerprintPlan(CUstream stream, const std::vector<OperandSpec>& specs) noexcept;

// Enqueues every operand of `specs` for op `token` on `stream` at once (after the call); only
// where fingerprintPlan said all after just before the call (an uncaptured stream is not asked
// again whether it is being captured). `nodes`: the call's graph nodes, when captured.
void fingerprintAllOperands(uint64_t token, CUstream stream, std::vector<OperandSpec> specs,
                            const DigestPlan& plan, const CallNodes* nodes = nullptr) noexcept;

// The row width (bytes) of the last GEMM output on this thread: a token's hidden vector, used as
// the row width of the collectives that follow (0 = unknown).
int64_t lastGemmRowBytes();
void setLastGemmRowBytes(int64_t bytes);

}  // namespace detrace::tracer
