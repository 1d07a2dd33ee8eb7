// ReorderBuffer: puts what the tracer sees into one sequence in API (launch) order.
//
// Why. A trace's sequence numbers must follow the order in which the program asked for work, so
// that a library op (a GEMM or collective, recorded when its API is called) precedes the kernels
// it launches, and those kernels can name it as parent_seq. But a kernel's GPU times, grid and
// name arrive later and out of order, in CUPTI activity buffers. So every launch takes a slot at
// API time, in a FIFO kept in API order; the slot is completed by its activity record(s), matched
// by CUPTI correlation id; completed slots at the head are appended to the sink (the TraceWriter,
// which hands out the sequence numbers). Library ops are complete when they are added.
//
//  - A graph launch is a group slot: every kernel/memcpy/memset replayed from the graph carries
//    the launch's correlation id. The group completes when it holds the number of records the
//    caller expects (counted from the graph's nodes) or, when that is unknown, at the timeout or
//    flush; the count seen then is remembered for the next launch of the same executable graph,
//    unless the caller said the count varies from launch to launch (conditional nodes): then
//    every launch waits for its timeout. Its records are written in GPU start order.
//  - A graph launch may replay library ops captured into the graph (GEMMs, collectives recorded
//    once, at capture, as templates): the launch carries them (GraphOpTemplate) and takes one
//    token per op after its own, and each is written as an event of its own kind among the
//    launch's records, just before the kernels it ran. Where that is comes from the tracer's own
//    kernels captured around each op (its digests, `own` records): they arrive like the graph's
//    other records, count towards its completion, mark the op's place and are never written.
//  - A slot older than the timeout, or any slot at flush(), is written without GPU times.
//  - When `capacity` slots are pending, the oldest is written as it is (counted) to make room.
//  - An activity record with no slot (e.g. a launch the callbacks did not see) is written when it
//    arrives; one that comes after its slot was written is counted as late and dropped.
//
// Placement by correlation id (ReorderOptions::place_records, `--capture meta|digest` without
// launch callbacks). CUPTI numbers every API call it traces from one counter, so a kernel record's
// correlation id says where its launch came among the library calls, whose places are the
// correlation ids of marker calls they make (LibraryOp::position; a graph launch's is its own id).
// Records with no slot are then held, ordered by correlation id, and written among the slots in
// that order, once `records_hold_ns` have passed since their kernel started (a record still to come
// for a smaller id then belongs to a kernel that waited longer than that: it is written when it
// comes, out of place, and counted as placed_late). A slot is written once complete and as old as
// the hold, in the order of the positions, whatever order the slots came in (two threads' ops may
// come in the other way round than their markers: the hold covers the moment between them). A
// held record's parent is the library op whose call window (open and close edges, also marked by
// correlation ids: addWindowEdge) holds its id and whose stream, when the window names one, is
// the record's: the innermost if several. So with several threads launching at once,
// a kernel another thread launched on another stream during a library call is not taken for that
// call's; one launched on the call's own stream still is.
//
// This class knows no CUPTI types: the CUPTI adapter decodes records into the plain structs below,
// so CPU tests drive it with fake launch, activity and library-op streams.
//
// The way in (the program's threads). Launches and library ops never take the buffer's mutex:
// each takes a ticket (its token) from one atomic counter and writes itself into the ticket's cell
// of a bounded ring; the side that takes GPU records (addActivity, poll, flush and the other
// methods that read the FIFO) moves published cells into the FIFO, in ticket order, under the
// mutex. So a launching thread pays an atomic add and a copy, not a lock it would share with the
// thread decoding activity buffers. A plain launch is published once its API call has returned
// (addLaunchAtExit: its driver alias and outcome already known, no lock afterwards either). When
// the ring is full, the launching thread moves cells itself. Because a plain launch's slot appears
// at API exit, a kernel record that finds no slot while a launch is in flight is held until its
// slot comes (see launchEntering).
//
// Thread-safety: every method may be called from any thread. The sink is called with the mutex
// held, so it must not call back into the buffer.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "detrace/db/records.h"

namespace detrace::tracer {

// Where ordered events go: the TraceWriter in the tracer, a fake in tests.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Each returns the event's sequence number, or nullopt if it was dropped.
  virtual std::optional<int64_t> append(const db::Event& event) = 0;
  virtual std::optional<int64_t> appendCollective(const db::Event& event,
                                                  const db::Collective& collective) = 0;
  virtual std::optional<int64_t> appendGemm(const db::Event& event, const db::Gemm& gemm) = 0;
  virtual std::optional<int64_t> appendMarker(const db::Event& event, const db::Marker& marker) = 0;
  // Links an appended op to the graph launch that replayed it (graph_ops); false if dropped.
  // Sinks that keep no such rows accept and ignore them.
  virtual bool appendGraphOp(const db::GraphOp& op) {
    (void)op;
    return true;
  }
};

// A library op (GEMM or collective) recorded at API time: complete when added. NVTX markers take
// the same path, so that they sit between the launches they separate.
struct LibraryOp {
  db::Event event;
  std::variant<db::Collective, db::Gemm, db::Marker> detail;
  // Its place among kernel records (placement by correlation id): the correlation id of a marker
  // call made before the library call; 0: unknown.
  uint64_t position = 0;
  // The streams.id its kernels' records carry (placement: a window takes records of that stream
  // only); db::kUnset: unknown, any. Not written.
  int64_t record_stream = db::kUnset;
};

// A library op captured into a CUDA graph, as every launch of the graph replays it.
struct GraphOpTemplate {
  LibraryOp op;            // the captured call (its cpu_ns, stream and correlation id are replaced
                           // by the launch's)
  uint64_t template_token = 0;          // the captured call's own slot (written at capture)
  int64_t template_seq = db::kUnset;    // its seq, if known (else looked up by token)
  int32_t own_before = 0;  // the tracer's own kernels the graph runs just before the op's kernels
  int32_t own_after = 0;   // ... and just after them
  // The graph node ids of the op's kernels (the nodes its call created at capture, and their
  // copies in executable and cloned graphs): a replayed record whose graphNodeId is among them is
  // the op's. With `by_nodes` the op is placed by them alone (its digests may all come after its
  // kernels); without, between its own kernels (own_before, own_after).
  std::vector<int64_t> node_ids;
  bool by_nodes = false;
  // A call its library refused while it was captured: only its input digests are in the graph.
  // Replays place the others around its own kernels as ever but write nothing of it (on_written
  // hears kSeqDiscarded).
  bool refused = false;
};
using GraphOpTemplates = std::vector<GraphOpTemplate>;

// ApiLaunch::expected_activities of a graph launch whose graph's record count is not known (its
// nodes could not be counted): the count its first launch gets by the timeout is learnt for the
// next launches of the same executable graph.
inline constexpr int32_t kRecordsUnknown = -1;
// ... and of one whose count changes from launch to launch (conditional nodes: a while loop's or an
// if's body runs as often as the GPU decides): never learnt, so every launch waits for its
// timeout (or a flush or settle) and keeps all its records, however many.
inline constexpr int32_t kRecordsVary = -2;

// A launch seen at API time (CUPTI callback): its place in the order and what the API knows.
struct ApiLaunch {
  uint64_t correlation_id = 0;
  db::EventKind kind = db::EventKind::kKernel;  // kernel (incl. graph), memcpy or memset
  db::LaunchApi api = db::LaunchApi::kUnknown;
  int64_t cpu_ns = db::kUnset;
  int64_t name = db::kUnset;    // strings.id, used if no activity ever names it (e.g. "cudaGraphLaunch")
  int64_t stream = db::kUnset;  // streams.id of the stream passed to the API
  int32_t device = -1;
  bool is_graph = false;
  uint64_t graph_key = 0;            // the executable graph (to remember its record count)
  // Graph launches: records to wait for; kRecordsUnknown or kRecordsVary (above).
  int32_t expected_activities = kRecordsUnknown;
  bool notify_written = false;       // call on_written with its seq (deep-window launches)
  // Graph launches: the library ops the graph replays, in capture order (null: none). Op i takes
  // the token after the launch's + i, and on_written reports its seq.
  std::shared_ptr<const GraphOpTemplates> graph_ops;
  // Per op of graph_ops, this launch's per-communicator number for a collective (kUnset: keep
  // the template's); empty when the graph replays no collective.
  std::vector<int64_t> graph_op_comm_seqs;
  int64_t graph_replay = db::kUnset;  // launch number of this executable graph (graph_ops.replay)
};

// A decoded activity record (kernel, memcpy or memset), completing a slot.
struct Activity {
  uint64_t correlation_id = 0;
  db::EventKind kind = db::EventKind::kKernel;
  int64_t name = db::kUnset;    // strings.id of the demangled kernel name or "memcpy HtoD", ...
  int64_t stream = db::kUnset;  // streams.id
  int32_t device = -1;
  uint32_t context = 0;  // CUPTI's id of the context it ran in (0: unknown)
  int64_t gpu_start_ns = db::kUnset;
  int64_t gpu_end_ns = db::kUnset;
  int64_t graph_id = db::kUnset;
  int64_t graph_node_id = db::kUnset;
  bool has_launch = false;
  db::LaunchInfo launch;
  // The tracer's own kernel (a digest captured into a graph, named detrace_*): it counts towards
  // its graph launch's records and marks where captured ops ran, and is never written.
  bool own = false;
};

// on_written's seq for an op or launch that the sink dropped (it has no sequence number).
inline constexpr int64_t kSeqDropped = -2;
// on_written's seq for a library op discarded before it was written (discardLibraryOp: a call
// that never ran, e.g. inside an NCCL group that was only simulated).
inline constexpr int64_t kSeqDiscarded = -4;

struct ReorderOptions {
  size_t capacity = size_t{1} << 16;      // pending slots before the oldest is forced out
  int64_t timeout_ns = 5'000'000'000;     // a slot older than this is written without GPU times
  size_t max_group_records = 4096;        // records kept per graph launch; more are dropped
  size_t max_remembered_graphs = 4096;    // executable graphs whose record count is remembered
  // Drop activity records with no slot instead of writing them (counted as unmatched): a
  // recording window skips launches on purpose, and their GPU records must not leak in.
  bool drop_unmatched = false;
  // Cells of the way-in ring (rounded up to a power of two): launches and ops published but not
  // yet moved into the FIFO. When it is full, the launching thread moves cells itself.
  size_t ingress_cells = size_t{1} << 14;
  // Called (with the buffer's lock held) when a library op (graph-replayed ones included), or a
  // launch with notify_written, is written with its sequence number (a launch's first record's),
  // or kSeqDropped if the sink dropped it.
  void (*on_written)(uint64_t token, int64_t seq) = nullptr;
  // Placement by correlation id (see the top of this file): records with no slot are held and
  // written in correlation order among the slots instead of on arrival.
  bool place_records = false;
  int64_t records_hold_ns = 500'000'000;  // how long a held record or a slot waits for earlier ones
  size_t max_held_records = size_t{1} << 17;  // more: the oldest is written at once (counted)
};

// Counters, written to the trace's stats table at the end.
struct ReorderStats {
  int64_t launches = 0;            // launch slots taken
  int64_t library_ops = 0;         // GEMMs and collectives
  int64_t activities = 0;          // activity records received
  int64_t matched = 0;             // records that completed a slot
  int64_t matched_by_alias = 0;    // ... found through the slot's alias (its nested driver call)
  int64_t unmatched = 0;           // records with no slot, written on arrival
  int64_t late = 0;                // records whose slot was already written (dropped)
  int64_t timed_out = 0;           // slots written without (all) GPU records after the timeout
  int64_t flushed_incomplete = 0;  // slots written without (all) GPU records at flush
  int64_t overflowed = 0;          // slots forced out because the buffer was full
  int64_t failed_launches = 0;     // launches whose API call failed
  int64_t group_records_dropped = 0;
  int64_t sink_dropped = 0;        // events the sink refused (writer queue full)
  int64_t own_records = 0;         // the tracer's own memsets/memcpys/kernels (dropped)
  int64_t graph_ops = 0;           // library ops written for graph launches that replayed them
  int64_t graph_ops_by_count = 0;  // ... of them placed by counting own kernels, not by node ids
  int64_t graph_op_rows_dropped = 0;  // their graph_ops rows the sink refused
  int64_t held_early = 0;          // kernel records held because they came before their slot could
  int64_t ingress_full = 0;        // times a launching thread found the way-in ring full
  int64_t placed = 0;              // records written by placement (place_records)
  int64_t placed_late = 0;         // ... after something with a larger correlation id
  int64_t placed_forced = 0;       // ... before their hold was over (max_held_records)
  int64_t placed_with_parent = 0;  // ... inside a library call's window (given it as parent)
  int64_t discarded_ops = 0;       // library ops discarded before they were written (never ran)
  // Launches of graphs whose record count varies (kRecordsVary): each waits for its timeout.
  int64_t varying_graph_launches = 0;
};

class ReorderBuffer {
 public:
  explicit ReorderBuffer(EventSink& sink, ReorderOptions options = {});

  // Takes the next slot in API order. `parent` is the token of the library op whose call made
  // this launch (0: none). Returns the slot's token (> 0); a graph launch with graph_ops takes the
  // tokens after it too, one per op.
  uint64_t addLaunch(const ApiLaunch& launch, uint64_t parent = 0);
  // A plain launch's API call is starting (call before the call; addLaunchAtExit ends it, given
  // the generation this returns). While any is in flight, a kernel record with no slot is held
  // (it may be that launch's, come before its slot) until its slot comes, nothing is in flight
  // any more, or poll() finds kEarlyWaitNs passed since the kernel ended; otherwise it is
  // unmatched at once.
  uint32_t launchEntering();
  // Forgets launches whose API exit was never seen (capture stopped inside their callbacks): a
  // new generation, whose count starts at 0; the old generation's launches end nothing.
  // Ends a launchEntering() without a slot (the launch was captured into a CUDA graph, not run).
  void launchAbandoned(uint32_t generation);
  void resetInFlight();
  // A plain launch whose API call has returned, in one step: its slot (taken now, at API exit),
  // the correlation id of the driver call nested in it (`alias`, 0: none) and whether the call
  // failed. Lock-free unless the ring is full. Returns the token.
  uint64_t addLaunchAtExit(ApiLaunch launch, uint64_t parent, uint64_t alias, bool failed,
                           uint32_t generation);
  // Another correlation id that also names the slot (a driver launch nested in a runtime one).
  void addAlias(uint64_t token, uint64_t correlation_id);
  // The launch's API call failed: no GPU record will come; the slot is written as it is.
  void launchFailed(uint64_t token);
  // Appends a library op in API order; returns its token (usable as a parent). Lock-free like
  // addLaunchAtExit: the op is written by the next call that takes GPU records (addActivity,
  // poll, flush) or reads the FIFO (seqOf, stats, pending, completeLibraryOp). With
  // complete = false the op waits for completeLibraryOp() (or the timeout, or flush) before it is
  // written: NCCL reports its algorithm and protocol during the call, after the op was added.
  uint64_t addLibraryOp(const LibraryOp& op, uint64_t parent = 0, bool complete = true);
  // The same, taking an op already on the heap (no copy: a library call's hot path).
  uint64_t addLibraryOp(std::unique_ptr<LibraryOp> op, uint64_t parent = 0, bool complete = true);
  // Completes a library op added with complete = false; `update` may amend it (it runs with the
  // buffer's mutex held: it must not call back into the buffer). False if it was already written.
  bool completeLibraryOp(uint64_t token, const std::function<void(LibraryOp&)>& update = {});
  // Library op `token` (added incomplete, not yet written) never ran: it is not written, takes no
  // sequence number, and on_written hears kSeqDiscarded. False if it was written already.
  bool discardLibraryOp(uint64_t token);
  // Completes a slot (or a part of a graph launch), or writes an unmatched record. A memcpy or
  // memset that carries a plain kernel launch's correlation id was issued by the tracer inside
  // that launch's callback (a kernel launch makes none): it is dropped and counted.
  void addActivity(const Activity& activity);
  // The memcpy/memset API call with this correlation id, made at `now_ns` (the trace's clock), was
  // the tracer's own (e.g. deep mode's zero fill): its record is dropped when it comes. One that
  // has not come within kIgnoreForNs (records were off, or CUPTI dropped it) is forgotten, so a
  // program's call that gets the same 32-bit id after a wrap is never taken for it: 10 minutes,
  // longer than a copy waits behind the GPU's queue, shorter than 2^32 calls take.
  void ignoreCorrelation(uint64_t correlation_id, int64_t now_ns);
  static constexpr int64_t kIgnoreForNs = 600'000'000'000;
  // Writes head slots older than the timeout, measured against `now_ns` (CUPTI's clock).
  void poll(int64_t now_ns);
  // Writes every pending slot, complete or not (at exit, or at a capture's stop), and closes
  // the windows of library calls still open.
  void flush();
  // Writes what is complete now, whatever the hold of placement by correlation id, in order up to
  // the last held record of `context` (CUPTI's context id; 0: every context's records): the held
  // records and the complete slots placed up to it, before the first incomplete slot. A commit
  // at that context's teardown, when its records are all in: what is placed after them (another
  // context's records, still running, whose slower streams' records may still come before them)
  // keeps waiting for its hold.
  void settle(uint32_t context = 0);
  // ReorderOptions::drop_unmatched, changed while recording (a window given to `detrace attach`).
  void setDropUnmatched(bool on);
  // ReorderOptions::place_records, changed at a capture start (held records are written first).
  void setPlaceRecords(bool on);
  // An executable graph is destroyed: the record count learnt for its key is forgotten, and a
  // launch of it still waiting learns none at its timeout (a new graph may be made at its
  // address).
  void forgetGraph(uint64_t graph_key);
  // A library call's window opens (open = true) or closes at the marker call whose correlation id
  // is `position` (placement by correlation id: held records inside it take `op_token` as their
  // parent). `stream` (opening edges): the streams.id its kernels' records carry, so that records
  // of other streams stay out; db::kUnset takes records of any stream. Lock-free, like addLibraryOp.
  void addWindowEdge(uint64_t op_token, uint64_t position, bool open, int64_t stream = db::kUnset);

  // The sequence number a written slot got (nullopt if pending, dropped or forgotten).
  std::optional<int64_t> seqOf(uint64_t token);
  ReorderStats stats();
  size_t pending();

 private:
  enum class State : uint8_t { kPending, kComplete };
  struct Slot {
    uint64_t token = 0;
    State state = State::kPending;
    bool is_library = false;
    bool discarded = false;  // a library op that never ran (discardLibraryOp): not written
    uint64_t parent = 0;
    uint64_t correlation_ids[2] = {0, 0};
    ApiLaunch launch;
    std::vector<Activity> records;  // 1 for a plain launch once matched; n for a graph
    std::vector<int64_t> own_starts;  // graphs: GPU starts of the tracer's own kernels
    int64_t received = 0;             // graphs: records that arrived (kept, dropped or own)
    std::optional<LibraryOp> op;
    bool graph_forgotten = false;  // its graph was destroyed while it waited: learns no count
    bool failed = false;           // its API call failed: nothing of it ran
    uint64_t place = 0;  // placement: where it goes among the records (placeSlotLocked)
  };
  enum class Reason { kComplete, kTimeout, kFlush, kOverflow };

  // A cell of the way-in ring. `seq` says whose it is: equal to a ticket, free for that ticket;
  // ticket + 1, published by it; the reader hands it on to ticket + cells.
  struct Cell {
    enum class What : uint8_t { kLaunch, kLibrary, kSkip, kWindowOpen, kWindowClose };
    std::atomic<uint64_t> seq{0};
    What what = What::kSkip;
    bool failed = false;
    bool complete = true;  // library ops
    uint64_t parent = 0;
    uint64_t alias = 0;
    ApiLaunch launch;
    std::unique_ptr<LibraryOp> op;
  };

  Cell& claimCell(uint64_t ticket);
  void publish(Cell& cell, uint64_t ticket);
  void drainIngressLocked(size_t max = SIZE_MAX);
  void forgetIgnoredBeforeLocked(int64_t time_ns);  // ignored ids made before time_ns
  void takeCellLocked(Cell& cell, uint64_t token);
  void pushLocked(Slot slot);
  bool matchLocked(const Activity& activity, bool final);
  bool mayBeEarlyLocked(const Activity& activity) const;
  // resolveEarlyLocked's time: none (nothing expires), or flush (everything does).
  static constexpr int64_t kNoTime = INT64_MIN;
  static constexpr int64_t kSettleAll = INT64_MAX;
  uint64_t publishLaunch(ApiLaunch launch, uint64_t parent, uint64_t alias, bool failed);
  void resolveEarlyLocked(int64_t now_ns);
  void endInFlight(uint32_t generation);
  uint32_t inFlightLocked() const;
  std::deque<Slot>::iterator findItLocked(uint64_t token);
  Slot* findLocked(uint64_t token);
  std::deque<Slot>::iterator nextLocked();
  void drainLocked();
  void writeHeadLocked(Reason reason);
  void writeSlotLocked(Slot& slot);
  void writeGraphLocked(Slot& slot, const db::Event& base);
  std::optional<int64_t> writeGraphOpLocked(const Slot& slot, size_t i, const db::Event& base,
                                            int64_t gpu_start, int64_t gpu_end);
  db::Event baseEventLocked(const Slot& slot) const;
  void rememberSeqLocked(uint64_t token, std::optional<int64_t> seq);
  std::optional<int64_t> seqOfLocked(uint64_t token) const;
  void forgetCorrelationsLocked(const Slot& slot);
  void rememberIncompleteLocked(uint64_t correlation_id);
  // Placement by correlation id.
  static uint64_t positionOf(const Slot& slot);
  void placeSlotLocked(Slot& slot);
  void holdRecordLocked(const Activity& activity);
  // placeLocked's `settle_before`: nothing, or everything, is written whatever its hold.
  static constexpr uint64_t kSettleNothing = 0;
  static constexpr uint64_t kSettleEverything = UINT64_MAX;
  void placeLocked(uint64_t settle_before);
  uint64_t settleBeforeLocked(uint32_t context);
  void writeHeldBeforeLocked(uint64_t position);
  void writeHeldFrontLocked();
  uint64_t windowParentLocked(uint64_t correlation_id, int64_t stream);
  void takeWindowEdgeLocked(const Cell& cell);

  EventSink& sink_;
  ReorderOptions options_;  // fixed but for drop_unmatched (changed under mu_)
  std::mutex mu_;
  // The way in: tickets (tokens) from next_ticket_, cells_[ticket & cell_mask_]; consumed_ is the
  // next ticket to move into the FIFO (under mu_).
  std::unique_ptr<Cell[]> cells_;
  uint64_t cell_mask_ = 0;
  std::atomic<uint64_t> next_ticket_{1};
  std::atomic<uint64_t> in_flight_{0};  // generation << 32 | launches in flight (launchEntering)
  uint64_t consumed_ = 1;
  std::deque<Slot> pending_;
  // Kernel records that found no slot while a launch was in flight (a plain launch's slot appears
  // at its API exit): held (at most kMaxEarly) until their slot comes, nothing is in flight, or
  // kEarlyWaitNs after their kernel ended.
  static constexpr size_t kMaxEarly = 4096;
  static constexpr int64_t kEarlyWaitNs = 1'000'000'000;
  std::deque<Activity> early_;
  std::unordered_map<uint64_t, uint64_t> by_correlation_;  // correlation id -> token
  std::unordered_map<uint64_t, int32_t> graph_records_;    // graph key -> records per launch
  static constexpr size_t kRing = 4096;
  std::vector<std::pair<uint64_t, int64_t>> seq_ring_;  // token % kRing -> (token, seq)
  // Correlation ids of the last max_incomplete_ (max(kRing, capacity)) slots written without
  // (all) their GPU records: a record that comes for one later is late (dropped). The deque keeps
  // the order, the multiset the lookup (a record with no slot is checked against it: every launch
  // a recording window leaves out).
  size_t max_incomplete_;
  std::deque<uint64_t> written_incomplete_;
  std::unordered_multiset<uint64_t> written_incomplete_ids_;
  std::unordered_set<uint64_t> ignored_;  // the tracer's own memset/memcpy calls (bounded FIFO)
  std::deque<std::pair<uint64_t, int64_t>> ignored_order_;  // (id, API time), oldest first
  // Placement by correlation id: held records by correlation id, the latest time seen (CUPTI's
  // clock: poll's now, or a record's kernel end), the largest position written so far.
  std::deque<std::pair<uint64_t, Activity>> held_;  // sorted by correlation id, stable
  // The pending slots' (place, token), a min-heap: the slot written next is the first placed, not
  // the FIFO's head. Ops come into the FIFO in ticket order, and each thread takes its ticket a
  // moment after its marker (filling the op, finding its stream): another thread's op with a later
  // marker may come in first. last_place_: the largest place given (an op with no marker's).
  std::vector<std::pair<uint64_t, uint64_t>> by_place_;
  uint64_t last_place_ = 0;
  int64_t now_ns_ = INT64_MIN;
  uint64_t written_position_ = 0;
  // Library calls' windows. Their edges (marker ids) come long before the records inside them
  // (held for the hold), so they wait, sorted by id, until the written records reach them; the
  // windows then open where the last placed record was written are in `open_windows_` (opening
  // order: the innermost last). Both bounded.
  struct WindowEdge {
    uint64_t position = 0;  // the marker's correlation id
    uint64_t token = 0;     // the call's slot
    int64_t stream = db::kUnset;  // opening edges: its records' stream (kUnset: any)
    bool open = false;
  };
  struct OpenWindow {
    uint64_t token = 0;
    int64_t stream = db::kUnset;
  };
  static constexpr size_t kMaxWindowEdges = size_t{1} << 16;
  static constexpr size_t kMaxOpenWindows = 256;
  std::deque<WindowEdge> window_edges_;
  std::vector<OpenWindow> open_windows_;
  uint64_t windows_at_ = 0;  // the edges before this id have been applied to open_windows_
  void insertWindowEdgeLocked(const WindowEdge& edge);
  void applyWindowEdgeLocked(const WindowEdge& edge);
  void closeOpenWindowLocked(uint64_t token);
  ReorderStats stats_;
};

}  // namespace detrace::tracer
