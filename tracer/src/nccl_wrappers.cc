// LD_PRELOAD wrappers for NCCL: every collective and point-to-point call is recorded at API time
// (op, dtype, count, reduction, root/peer, buffers, communicator id/rank/size, per-communicator
// sequence number), then forwarded to the real NCCL unchanged. Communicator constructors teach the
// tracer this process's rank and world size; ncclRedOpCreatePreMulSum teaches it what a custom
// reduction operator is (CustomRedOps). Calls inside an open group wait for its end to be
// completed, at most kMaxGroupCalls of them: a group the program never ends stays bounded.
//
// In-process rules (see session.h): wrappers never throw, never change what NCCL returns, and
// forward even when recording is off or failed. If the real function cannot be found (which only
// happens if NCCL is not loaded at all) they return ncclSystemError with one line on stderr.
#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <new>
#include <bitset>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "detrace/tracer/custom_redops.h"
#include "detrace/tracer/lasting_thread_local.h"
#include "fingerprinter.h"
#include "library_ops.h"
#include "placement.h"
#include "writer_ids.h"
#include "nccl_profiler_plugin.h"
#include "next_symbol.h"

namespace detrace::tracer {
namespace {

constexpr const char* kNccl = kNcclLibrary;

db::DType ncclDType(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return db::DType::kI8;
    case ncclUint8: return db::DType::kU8;
    case ncclInt32: return db::DType::kI32;
    case ncclInt64: return db::DType::kI64;
    case ncclFloat16: return db::DType::kF16;
    case ncclFloat32: return db::DType::kF32;
    case ncclFloat64: return db::DType::kF64;
    case ncclBfloat16: return db::DType::kBF16;
    case ncclFloat8e4m3: return db::DType::kF8E4M3;
    case ncclFloat8e5m2: return db::DType::kF8E5M2;
    default: return db::DType::kUnknown;
  }
}

// Bytes of one element of `t` (a PreMulSum scalar's); 0 for a type this NCCL header does not name.
size_t ncclTypeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// The custom reduction operators the program made (never destroyed: NCCL's threads may call in
// at exit).
CustomRedOps& customRedOps() {
  static auto* ops = new CustomRedOps;
  return *ops;
}

// Group nesting on this thread, and the id of the outermost open group.
thread_local int t_group_depth = 0;
thread_local int64_t t_group_id = -1;
thread_local uint64_t t_group_first_op = 0;
// Calls made in this thread's open group. The first kMaxGroupCalls wait for its end (pendingCalls,
// groupSeqs); a program that never ends its group (its bug) must not grow those without end,
// so a call past them is recorded complete at once (see heldForGroupEnd).
thread_local size_t t_group_calls = 0;

// Calls recorded on this thread whose NCCL choices have not arrived yet (see settle()).
struct Pending {
  uint64_t token;
  bool p2p;
  CUstream stream;
  std::vector<OperandSpec> outputs;  // fingerprinted once NCCL has enqueued its kernels
  ncclComm_t comm;
  const void* send;
  const void* recv;
  size_t count;      // as passed (NCCL reports it back)
  int peer;          // Send/Recv: the peer (NCCL reports it back)
  int device = -1;   // on the default stream: its communicator's device (-1: unknown)
};
// This thread's (lasting_thread_local.h: also from exit handlers, after its thread_locals died).
std::vector<Pending>& pendingCalls() {
  struct Tag;
  return lastingThreadLocal<std::vector<Pending>, Tag>();
}
// A communicator sequence number taken, in its lane (CommRegistry: the collectives', or one
// peer's sends or receives).
struct TakenSeq {
  ncclComm_t comm;
  int64_t seq;
  int64_t lane;
};
// The communicator sequence numbers taken inside this thread's open group, recorded calls or not
// (given back if the group is only simulated).
std::vector<TakenSeq>& groupSeqs() {
  struct Tag;
  return lastingThreadLocal<std::vector<TakenSeq>, Tag>();
}
std::vector<NcclChoice>& reportedChoices() {
  struct Tag;
  return lastingThreadLocal<std::vector<NcclChoice>, Tag>();
}
constexpr size_t kMaxChoices = 4096;  // more calls than that in one group: the rest get none
constexpr size_t kMaxGroupCalls = kMaxChoices;
std::atomic<int64_t> g_next_group{0};
// The numbers taken by a group's calls past kMaxGroupCalls (not in groupSeqs()): per
// communicator one run of consecutive numbers, so that a simulated end gives them back too
// (newest first, before the held calls' own). A run another thread's call broke into is not given
// back (nor, then, are the held calls' numbers on that communicator: returnSeq refuses them).
struct SeqRun {
  ncclComm_t comm;
  int64_t lane;
  int64_t first, last;
  bool broken;
};
std::vector<SeqRun>& groupSeqRuns() {
  struct Tag;
  return lastingThreadLocal<std::vector<SeqRun>, Tag>();
}
constexpr size_t kMaxSeqRuns = 64;  // communicators (and peers' lanes) of one group

// The group's calls past kMaxGroupCalls that were recorded (complete at once: a simulated end
// cannot discard them).
thread_local int64_t t_group_unheld_recorded = 0;
// Inside one of this thread's NCCL calls that may make NCCL report choices (a collective, a send
// or receive, a group end): a choice reported here is that call's, recorded or not (paused,
// outside --window), never a call another thread deferred.
thread_local int t_in_call = 0;
struct InCall {
  InCall() noexcept { ++t_in_call; }
  ~InCall() { --t_in_call; }
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;
};

struct Call {
  db::CollOp op;
  const char* name;
  const void* send;
  const void* recv;
  size_t count;
  ncclDataType_t dtype;
  int redop;  // -1: not a reduction
  int root;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};

int commDevice(ncclComm_t comm);
void resolveDevice(ncclComm_t comm) noexcept;
void followLate(ncclComm_t comm) noexcept;
size_t settleInProgress(ncclComm_t comm, bool outputs, bool failed = false) noexcept;

// The reduction of a call: NCCL's built-in operators as they are; a custom one as what the
// program made it (ncclRedOpCreatePreMulSum), with the scalar NCCL took from the host; one whose
// making the tracer did not see (before it loaded, past CustomRedOps' bound) as an unknown custom
// operator, counted and said once.
static_assert(ncclNumOps == 5, "NCCL has a built-in reduction detrace does not name (db::RedOp)");
void describeRedOp(const Call& c, db::Collective& coll) {
  if (c.redop < static_cast<int>(ncclNumOps)) {  // -1: not a reduction
    coll.redop = static_cast<db::RedOp>(c.redop);
    return;
  }
  const std::optional<CustomRedOps::PreMulSum> op = customRedOps().find(c.comm, c.redop);
  if (!op) {
    coll.redop = db::RedOp::kUnknownCustom;
    Session::get().addStat("nccl_redops_unknown", 1);
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      logLine("a collective used a reduction operator (%d) that is neither built in nor one the tracer saw "
              "made (made before the tracer loaded, or never made, in which case NCCL refuses the call): "
              "recorded as an unknown custom operator", c.redop);
    }
    return;
  }
  coll.redop = db::RedOp::kPreMulSum;
  coll.has_redop_scalar = op->host && op->datatype == static_cast<int32_t>(c.dtype);  // NCCL refuses others
  if (coll.has_redop_scalar) coll.redop_scalar = op->scalar;
}

// Whether this call may wait for the end of its group to be completed (settle()): any call outside
// a group, and the first kMaxGroupCalls of one. A call past them is still forwarded and numbered,
// and is recorded complete at once, without its outputs' digests or NCCL's choices: nothing would
// complete it at an end that may never come, and the reorder buffer would hold everything after it
// until its timeout. Counted (nccl_group_calls_past_cap) and said once. In a group only simulated,
// such calls stay in the trace as if they had run (counted as nccl_simulated_calls_written), their
// numbers given back with the held calls' (groupSeqRuns()).
bool heldForGroupEnd() noexcept {
  if (t_group_depth == 0 || t_group_calls++ < kMaxGroupCalls) return true;
  try {
    Session::get().addStat("nccl_group_calls_past_cap", 1);
  } catch (...) {
  }
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    logLine("an NCCL group holds more than %zu calls (ncclGroupStart without its ncclGroupEnd?): the calls "
            "past them are recorded without their outputs' digests or NCCL's choices", kMaxGroupCalls);
  }
  return false;
}

// A number taken by a call past kMaxGroupCalls (see groupSeqRuns()).
void notePastCapSeq(ncclComm_t comm, int64_t lane, int64_t seq) noexcept {
  try {
    for (SeqRun& r : groupSeqRuns()) {
      if (r.comm != comm || r.lane != lane) continue;
      if (seq != r.last + 1) r.broken = true;
      r.last = seq;
      return;
    }
    if (groupSeqRuns().size() < kMaxSeqRuns) {
      groupSeqRuns().push_back({comm, lane, seq, seq, false});
    }
  } catch (...) {
  }
}

// A recorded call that waits for NCCL's choices and its outputs' digests (settle()).
void holdPending(const Call& c, uint64_t token, const std::vector<OperandSpec>& specs) noexcept {
  try {
    Pending p{token, c.op == db::CollOp::kSend || c.op == db::CollOp::kRecv,
              reinterpret_cast<CUstream>(c.stream), {}, c.comm, c.send, c.recv, c.count, c.peer};
    if (p.stream == nullptr || p.stream == CU_STREAM_LEGACY || p.stream == CU_STREAM_PER_THREAD) {
      if (auto info = Session::get().comms().find(c.comm)) p.device = info->device;
    }
    for (const OperandSpec& s : specs) {
      if (s.role != db::OperandRole::kInput) p.outputs.push_back(s);
    }
    pendingCalls().push_back(std::move(p));
  } catch (...) {  // out of memory: the call stays recorded, without its outputs' digests
  }
}

// Whether digests on `stream` run on the communicator's device. A special handle (0, the legacy
// or per-thread default stream) means the current context's stream, and a thread driving several
// GPUs may make every device's call with another device current (NCCL switches itself): digests
// there would read another GPU's buffers, faulting the program's context without peer access.
bool digestsRunOnCommDevice(cudaStream_t stream, int comm_device) noexcept {
  const auto s = reinterpret_cast<CUstream>(stream);
  if (s != nullptr && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) return true;  // its own context's
  if (comm_device < 0) return true;  // unknown: as before
  const int current = currentDevice();
  return current < 0 || current == comm_device;  // none current: no context to digest in anyway
}

uint64_t record(const Call& c, std::vector<OperandSpec>* specs) {
  // Counted for every call, recorded or not (paused, outside a --window): the same collective must
  // carry the same number on every rank, whenever each rank's recording started.
  settleInProgress(c.comm, /*outputs=*/true);  // NCCL has made its calls by now (its rules)
  const bool held = heldForGroupEnd();
  int64_t seq = db::kUnset;
  const int64_t lane = CommRegistry::laneOf(c.op, c.peer);
  try {
    if (Session::get().enabled()) {
      followLate(c.comm);
      seq = Session::get().comms().nextSeq(c.comm, lane);
    }
    if (t_group_depth > 0 && seq >= 0) {
      if (held) {
        groupSeqs().push_back({c.comm, seq, lane});
      } else {
        notePastCapSeq(c.comm, lane, seq);
      }
    }
    if (seq == 0) resolveDevice(c.comm);
  } catch (...) {
  }
  uint64_t token = recordLibraryOp([&](db::TraceWriter& w, LibraryOp& op) {
    auto comm = Session::get().comms().find(c.comm);
    db::Event& e = op.event;
    e.kind = db::EventKind::kCollective;
    e.name = cachedConstantId(w, c.name);  // a literal (the entry point's name)
    e.device = comm ? comm->device : -1;
    e.stream = opStreamId(w, reinterpret_cast<int64_t>(c.stream), e.device, op.record_stream);
    db::Collective coll;
    coll.op = c.op;
    coll.dtype = ncclDType(c.dtype);
    coll.count = static_cast<int64_t>(c.count);
    describeRedOp(c, coll);
    coll.root = c.root;
    coll.peer = c.peer;
    if (comm) {
      coll.comm_id = comm->id;
      coll.comm_rank = comm->rank;
      coll.comm_nranks = comm->nranks;
    }
    coll.comm_seq = seq;
    coll.send_addr = reinterpret_cast<int64_t>(c.send);
    coll.recv_addr = reinterpret_cast<int64_t>(c.recv);
    coll.group_id = t_group_depth > 0 ? t_group_id : db::kUnset;
    op.detail = coll;
    *specs = collectiveOperandSpecs(coll, lastGemmRowBytes());
    if (!specs->empty() && !digestsRunOnCommDevice(c.stream, e.device)) {
      Session::get().addStat("nccl_fingerprints_skipped_other_device", 1);
      specs->clear();
    }
    return true;
  }, /*complete=*/!held);
  if (t_group_depth > 0 && t_group_first_op == 0) t_group_first_op = token;
  if (token != 0 && held) holdPending(c, token, *specs);
  if (token != 0 && !held) ++t_group_unheld_recorded;
  return token;
}

// NCCL's choices for this thread's calls, from the profiler plugin (nccl_profiler_plugin.cc). NCCL
// reports them while the call runs (ungrouped) or at the outermost ncclGroupEnd (grouped), on the
// calling thread for blocking communicators; they are matched to the recorded calls by what each
// call is (ChoiceCursor), not by order.
// Only a thread with recorded calls waiting keeps them: NCCL may report from threads of its own
// (a graph-captured plan's host callback) that never settle, and those must not grow without end.
void matchInProgress(const NcclChoice& choice) noexcept;
void onChoice(const NcclChoice& choice) noexcept {
  if (pendingCalls().empty() && t_group_depth == 0) {
    if (t_in_call > 0) return;  // this thread's own call, not recorded: no deferred call's
    matchInProgress(choice);  // NCCL's own thread, making calls that returned ncclInProgress
    return;
  }
  if (reportedChoices().size() >= kMaxChoices) return;
  try {
    reportedChoices().push_back(choice);
  } catch (...) {
  }
}

// Completes one recorded call: its outputs' fingerprints (NCCL has enqueued its kernels) and
// NCCL's algorithm, protocol and channels where the plugin reported them.
void complete(const Pending& p, const NcclChoice* choice, bool outputs) noexcept {
  try {
    // On the default stream the output digests run in the context current here: at a group's end,
    // or on the thread that heard a non-blocking call was made, which may be another device's
    // (torch.cuda.nccl's groups switch devices per call and back before the end).
    if (outputs && !p.outputs.empty() &&
        !digestsRunOnCommDevice(reinterpret_cast<cudaStream_t>(p.stream), p.device)) {
      Session::get().addStat("nccl_fingerprints_skipped_other_device", 1);
      outputs = false;
    }
    if (outputs) fingerprintOperands(p.token, p.stream, p.outputs, /*inputs=*/false);
    // started*(), not buffer()/writer(): a call recorded while capturing is completed even when a
    // stop came during it (the stop's drain waits for it; buffer() is null once capturing stops).
    ReorderBuffer* buffer = Session::get().startedBuffer();
    db::TraceWriter* w = Session::get().startedWriter();
    if (buffer == nullptr) return;
    int64_t algo = db::kUnset, proto = db::kUnset;
    if (choice && w) {
      if (*choice->algo) algo = w->intern(choice->algo);
      if (*choice->proto) proto = w->intern(choice->proto);
    }
    auto update = [&](LibraryOp& op) {
      if (choice == nullptr) return;
      auto* coll = std::get_if<db::Collective>(&op.detail);
      if (coll == nullptr) return;
      coll->algo = algo;
      coll->proto = proto;
      coll->channels = choice->channels;
    };
    buffer->completeLibraryOp(p.token, update);
    Fingerprinter::get().amendCaptured(p.token, update);  // a call captured into a CUDA graph
  } catch (...) {
  }
}

// Calls whose real call (or outermost group end) returned ncclInProgress: a non-blocking
// communicator's, whose kernels NCCL enqueues later from its own thread (when the call first
// connects peers). Their outputs are fingerprinted once NCCL says the communicator is ready
// (ncclCommGetAsyncError, from any thread), or at the next call on it (NCCL's rules make the
// program wait before that); their choices arrive on NCCL's thread, matched by buffers in order,
// possibly before the call returned (kept as `early` until it has).
struct InProgress {
  Pending call;
  bool has_choice = false;
  NcclChoice choice;
};
struct InProgressCalls {
  std::mutex mu;
  std::vector<InProgress> calls;
  std::atomic<size_t> count{0};
  // Settles take their calls and enqueue their digests one at a time (settle_mu, never taken on
  // NCCL's threads), and `settling` says one is under way: a thread that asks while another is
  // settling waits for it, so that no thread returns to the program before the digests of the
  // calls NCCL said were made are on their streams (PyTorch's watchdog and main thread both poll).
  std::mutex settle_mu;
  std::atomic<int> settling{0};
  std::vector<NcclChoice> early;  // reported on a thread with no call of its own, matched to none yet
};
constexpr size_t kMaxEarlyChoices = 64;
InProgressCalls& inProgress() {
  static auto* calls = new InProgressCalls;  // never destroyed: NCCL's threads may report at exit
  return *calls;
}
constexpr size_t kMaxInProgress = 4096;

// Whether `choice` is for `call`: same kind and buffers, and (strict) the same count, or peer for
// a send or receive (several sends of one buffer to different peers).
bool choiceFits(const Pending& call, const NcclChoice& choice, bool strict = false) {
  if (call.p2p != choice.p2p) return false;
  if (call.p2p) {
    if (choice.recv != (call.recv != nullptr ? call.recv : call.send)) return false;
    return !strict || choice.root_or_peer == call.peer;
  }
  if (choice.send != call.send || choice.recv != call.recv) return false;
  return !strict || choice.count == call.count;
}

// A choice NCCL reported on a thread with no recorded call of its own: NCCL's thread making calls
// that answered ncclInProgress (it may report before the call has returned to the program), or a
// CUDA graph's host callback replaying a captured call (which nothing waits for: bounded).
void matchInProgress(const NcclChoice& choice) noexcept {
  InProgressCalls& all = inProgress();
  try {
    std::lock_guard lk(all.mu);
    for (InProgress& c : all.calls) {
      if (c.has_choice || !choiceFits(c.call, choice)) continue;
      c.choice = choice;
      c.has_choice = true;
      return;
    }
    if (all.early.size() >= kMaxEarlyChoices) all.early.erase(all.early.begin());
    all.early.push_back(choice);
  } catch (...) {
  }
}

// A deferred call's choice that NCCL's thread reported before the call returned: the newest that
// fits, one of its count (or peer) first. Under all.mu.
std::optional<NcclChoice> takeEarlyChoice(InProgressCalls& all, const Pending& call) {
  for (bool strict : {true, false}) {
    auto it = std::find_if(all.early.rbegin(), all.early.rend(),
                           [&](const NcclChoice& c) { return choiceFits(call, c, strict); });
    if (it == all.early.rend()) continue;
    NcclChoice choice = *it;
    all.early.erase(std::next(it).base());
    return choice;
  }
  return std::nullopt;
}

// The reported choices by the buffers they must match (a collective's send and receive buffers,
// a send's or receive's buffer), for a group of many calls: each call then looks only at the
// choices of its own buffers, in report order, instead of at all of them, which is quadratic in
// the group's calls where NCCL reports them in another order than the calls' (a group's
// collectives by size). Per thread, allocated on first need (24 KiB: kept out of static TLS,
// which every thread of the program pays for from its stack) and freed with the thread; where
// it cannot be allocated, the choices are looked through in order. Rebuilt by each cursor.
struct ChoiceIndex {
  static constexpr uint16_t kNone = 0xffff;
  static constexpr size_t kBuckets = 2 * kMaxChoices;  // a power of two
  static_assert(kMaxChoices < kNone && (kBuckets & (kBuckets - 1)) == 0);
  std::array<uint16_t, kBuckets> head;      // the first choice of a bucket, or kNone
  std::array<uint16_t, kMaxChoices> next;   // the next of the same bucket (ascending), or kNone
  static size_t bucket(bool p2p, const void* a, const void* b) {
    const uint64_t h = (reinterpret_cast<uintptr_t>(a) + p2p) * 0x9e3779b97f4a7c15ull ^
                       reinterpret_cast<uintptr_t>(b) * 0xc2b2ae3d27d4eb4full;
    return static_cast<size_t>(h >> 40) & (kBuckets - 1);
  }
  static size_t bucketOf(const NcclChoice& c) {
    return c.p2p ? bucket(true, c.recv, nullptr) : bucket(false, c.send, c.recv);
  }
  static size_t bucketOf(const Pending& c) {  // the buffers choiceFits compares
    return c.p2p ? bucket(true, c.recv != nullptr ? c.recv : c.send, nullptr)
                 : bucket(false, c.send, c.recv);
  }
  void build(const std::vector<NcclChoice>& choices) {
    head.fill(kNone);
    for (size_t i = choices.size(); i-- > 0;) {
      const size_t b = bucketOf(choices[i]);
      next[i] = head[b];
      head[b] = static_cast<uint16_t>(i);
    }
  }
};
ChoiceIndex* choiceIndex() noexcept {
  struct Tag;
  std::unique_ptr<ChoiceIndex>& index = lastingThreadLocal<std::unique_ptr<ChoiceIndex>, Tag>();
  if (!index) index.reset(new (std::nothrow) ChoiceIndex);
  return index.get();
}

// NCCL's choices reported on this thread, handed to its recorded calls by what they are (kind,
// buffers, count or peer), not by order: NCCL reports a group's collectives in its plan's order
// (sorted by size, then by function, operation and type), its point-to-point calls by peer round,
// one thread's communicators one after the other, and reports none for some calls (count 0, one
// rank) and several for others (ncclAlltoAll: a send and a receive per peer).
// Each call gets the first reported choice that fits it exactly (count or peer too), else the first
// that fits its buffers; each choice once.
struct ChoiceCursor {
  static constexpr size_t kLinear = 64;  // up to this many choices: looked through in order
  std::bitset<kMaxChoices> used;  // no allocation: settle() must not throw
  size_t first_free = 0;           // the choices before it are all taken (in order: each call's is next)
  bool indexed = false;
  const NcclChoice* next(const Pending& call) {
    const std::vector<NcclChoice>& choices = reportedChoices();
    if (choices.size() > kLinear) {
      if (ChoiceIndex* index = choiceIndex()) return nextIndexed(call, choices, *index);
    }
    while (first_free < choices.size() && used[first_free]) ++first_free;
    for (bool strict : {true, false}) {
      for (size_t i = first_free; i < choices.size(); ++i) {
        if (used[i] || !choiceFits(call, choices[i], strict)) continue;
        used[i] = true;
        return &choices[i];
      }
    }
    return nullptr;
  }
  const NcclChoice* nextIndexed(const Pending& call, const std::vector<NcclChoice>& choices,
                                ChoiceIndex& index) {
    if (!indexed) index.build(choices);
    indexed = true;
    uint16_t& first = index.head[ChoiceIndex::bucketOf(call)];
    // Taken ones come off the front of the bucket's chain.
    while (first != ChoiceIndex::kNone && used[first]) first = index.next[first];
    for (bool strict : {true, false}) {
      for (uint16_t i = first; i != ChoiceIndex::kNone; i = index.next[i]) {
        if (used[i] || !choiceFits(call, choices[i], strict)) continue;
        used[i] = true;
        return &choices[i];
      }
    }
    return nullptr;
  }
};

// This thread's recorded calls, when the call or group end returned ncclInProgress.
void deferInProgress() noexcept {
  InProgressCalls& all = inProgress();
  ChoiceCursor choices;  // those NCCL reported before it went on on its own thread
  for (Pending& p : pendingCalls()) {
    const NcclChoice* choice = choices.next(p);
    std::optional<NcclChoice> early;
    try {
      std::lock_guard lk(all.mu);
      if (all.calls.size() < kMaxInProgress) {
        if (choice == nullptr && (early = takeEarlyChoice(all, p))) choice = &*early;
        all.calls.push_back({std::move(p), choice != nullptr, choice ? *choice : NcclChoice{}});
        all.count.store(all.calls.size(), std::memory_order_release);
        Session::get().addStat("nccl_calls_in_progress", 1);
        continue;
      }
    } catch (...) {
    }
    complete(p, choice, /*outputs=*/false);  // no room: recorded without its outputs' digests
  }
}

// NCCL says `comm` is ready (or failed: no outputs then), or a new call on it begins: completes its
// calls that returned ncclInProgress.
size_t settleInProgress(ncclComm_t comm, bool outputs, bool failed) noexcept {
  InProgressCalls& all = inProgress();
  // `count` is emptied after `settling` is raised: seeing it empty, a thread sees the settle too.
  if (all.count.load(std::memory_order_acquire) == 0 &&
      all.settling.load(std::memory_order_acquire) == 0) {
    return 0;
  }
  std::vector<InProgress> ready;
  std::unique_lock settle(all.settle_mu, std::defer_lock);
  try {
    settle.lock();
    all.settling.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard lk(all.mu);
    auto mine = std::stable_partition(all.calls.begin(), all.calls.end(),
                                      [&](const InProgress& c) { return c.call.comm != comm; });
    ready.assign(std::make_move_iterator(mine), std::make_move_iterator(all.calls.end()));
    all.calls.erase(mine, all.calls.end());
    all.count.store(all.calls.size(), std::memory_order_release);
  } catch (...) {
  }
  for (const InProgress& c : ready) {
    if (failed) Fingerprinter::get().refuseCaptured(c.call.token);  // NCCL says it never ran
    complete(c.call, c.has_choice ? &c.choice : nullptr, outputs);
  }
  if (settle.owns_lock()) all.settling.fetch_sub(1, std::memory_order_acq_rel);
  return ready.size();
}

// After the real call (or outermost group end) returned: completes the recorded calls, with NCCL's
// algorithm, protocol and channels where the plugin reported them; defers them if NCCL is still
// making them (ncclInProgress). A call NCCL refused (any other error) wrote nothing, and its
// buffers may be what it refused: no output digests then.
void settle(ncclResult_t result) noexcept {
  if (result == ncclInProgress) {
    deferInProgress();
  } else {
    ChoiceCursor choices;
    for (const Pending& p : pendingCalls()) {
      // Refused while captured: its input digests are in the graph, its kernels not.
      if (result != ncclSuccess) Fingerprinter::get().refuseCaptured(p.token);
      complete(p, choices.next(p), /*outputs=*/result == ncclSuccess);
    }
  }
  pendingCalls().clear();
  reportedChoices().clear();
}

// After an outermost ncclGroupSimulateEnd: the group's calls were only simulated, never run. They
// are not written (discarded, with their input fingerprints), take no output fingerprints, and
// give their communicators' sequence numbers back, newest first, so that the next real call on
// each carries the number it carries on ranks that simulated nothing. A call already written
// (a capture stop's drain gave up on the group after its 2 s) stays in the trace as if it had
// run, its number repeated by the next real call: counted, and said once.
void discardSimulated() noexcept {
  try {
    for (const SeqRun& r : groupSeqRuns()) {  // the calls past kMaxGroupCalls took the newest
      if (r.broken) continue;
      for (int64_t seq = r.last; seq >= r.first; --seq) {
        if (!Session::get().comms().returnSeq(r.comm, seq, r.lane)) break;
      }
    }
    for (auto it = groupSeqs().rbegin(); it != groupSeqs().rend(); ++it) {
      (void)Session::get().comms().returnSeq(it->comm, it->seq, it->lane);
    }
    // Captured into a graph, their input digests are in it: its replays must not say they ran.
    for (const Pending& p : pendingCalls()) Fingerprinter::get().refuseCaptured(p.token);
    if (ReorderBuffer* buffer = Session::get().startedBuffer()) {  // a stop may have come since
      // The calls past kMaxGroupCalls were written complete when recorded: in the trace as if
      // they had run, as a held call written before the end.
      int64_t written = t_group_unheld_recorded;
      for (const Pending& p : pendingCalls()) written += buffer->discardLibraryOp(p.token) ? 0 : 1;
      if (written > 0) {
        Session::get().addStat("nccl_simulated_calls_written", written);
        static std::once_flag said;
        std::call_once(said, [] {
          logLine("an NCCL group simulated (ncclGroupSimulateEnd) across a capture stop was written "
                  "before its end: its calls are in the trace as if they had run");
        });
      }
    }
  } catch (...) {
  }
  groupSeqs().clear();
  groupSeqRuns().clear();
  t_group_unheld_recorded = 0;
  pendingCalls().clear();
  reportedChoices().clear();
}

// Installs the sink when the tracer library is loaded.
const bool g_sink_installed = [] {
  setNcclChoiceSink(onChoice);
  return true;
}();

ncclResult_t missing(const char* name) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) logLine("%s: the real NCCL function was not found in this process", name);
  return ncclSystemError;
}

// Calls the real function with the op recorded first; kernels it launches become its children.
template <typename Fn, typename... Args>
ncclResult_t forward(RealFn<Fn>& real, const Call& c, Args... args) {
  Fn fn = real.get();
  if (fn == nullptr) return missing(c.name);
  std::vector<OperandSpec> specs;
  uint64_t token = record(c, &specs);
  fingerprintOperands(token, reinterpret_cast<CUstream>(c.stream), specs, /*inputs=*/true);
  ncclResult_t result;
  {
    ParentScope scope(token);
    InCall in_call;
    result = fn(args...);
  }
  if (t_group_depth == 0) settle(result);  // inside a group, NCCL decides at the outermost group end
  return result;
}

// The device a communicator uses (-1 if NCCL cannot say).
int commDevice(ncclComm_t comm) {
  static RealFn<decltype(&ncclCommCuDevice)> real("ncclCommCuDevice", kNccl);
  int dev = -1;
  auto fn = real.get();
  if (fn == nullptr || comm == nullptr || fn(comm, &dev) != ncclSuccess) return -1;
  return dev;
}

// A communicator made by an init call, without its device: NCCL may still be making it (inside a
// group, whose outermost end makes it, or a non-blocking one), and until then asking gives a wrong
// device (NCCL sets it when the communicator is made) or an error. Its first call asks
// (resolveDevice).
void registerComm(ncclComm_t comm, int64_t id, int rank, int nranks) {
  try {
    if (!Session::get().enabled() || comm == nullptr) return;
    // A call deferred on a communicator of this address that another thread destroyed or aborted
    // just before the deferral was noted is not this one's: completed without outputs.
    settleInProgress(comm, /*outputs=*/false);
    Session::get().comms().add(comm, CommInfo{id, rank, nranks, -1});
    if (Session::get().buffer() != nullptr) Session::get().updateRank();
  } catch (...) {
  }
}

// At a communicator's first call, which NCCL accepts only once the communicator is made: the
// device it was registered without.
void resolveDevice(ncclComm_t comm) noexcept {
  try {
    CommRegistry& comms = Session::get().comms();
    auto info = comms.find(comm);
    if (!info || info->device >= 0) return;
    const int dev = commDevice(comm);
    if (dev < 0) return;
    comms.setDevice(comm, dev);
    if (Session::get().buffer() != nullptr) Session::get().updateRank();
  } catch (...) {
  }
}

// A communicator made from another (split, shrink), once NCCL has given its handle: its id as
// derived when it was asked for, its rank and size from NCCL, its device from NCCL (else the
// parent's).
void registerDerivedComm(ncclComm_t nc, CommInfo info) noexcept {
  try {
    if (nc == nullptr || !Session::get().enabled()) return;
    settleInProgress(nc, /*outputs=*/false);  // as in registerComm
    static RealFn<decltype(&ncclCommUserRank)> user_rank("ncclCommUserRank", kNccl);
    static RealFn<decltype(&ncclCommCount)> count("ncclCommCount", kNccl);
    if (user_rank.get() && count.get()) {
      (void)user_rank.get()(nc, &info.rank);
      (void)count.get()(nc, &info.nranks);
    }
    if (const int dev = commDevice(nc); dev >= 0) info.device = dev;
    Session::get().comms().add(nc, info);
    if (Session::get().buffer() != nullptr) Session::get().updateRank();
  } catch (...) {
  }
}

// NCCL writes a split or shrunk communicator's handle only when the new communicator is ready:
// at the call's return, at the outermost ncclGroupEnd when called inside a group, or later, from
// NCCL's own thread, for a non-blocking one. Those of this thread's open group are followed at its
// end, where NCCL has just written them (the caller keeps the slot alive until then, as NCCL
// writes to it); those NCCL writes later, at the first call on them (followLate).
struct Promised {
  ncclComm_t* slot;
  CommInfo info;
};
std::vector<Promised>& promisedComms() {
  struct Tag;
  return lastingThreadLocal<std::vector<Promised>, Tag>();
}
constexpr size_t kMaxPromised = 1024;

// A handle NCCL writes after the call (or the group end) returned: a non-blocking parent's.
void expectLate(ncclComm_t* slot, const CommInfo& info) noexcept {
  try {
    Session::get().lateComms().expect(reinterpret_cast<const void* const*>(slot), info);
  } catch (...) {
  }
}

// A call on a communicator the registry does not know: one whose handle NCCL wrote after the call
// that asked for it returned (late_comms.h), or, if no slot holds it, one that is not followed:
// its calls go without id, rank and size, said once in the log and counted per communicator.
void followLate(ncclComm_t comm) noexcept {
  try {
    Session& s = Session::get();
    if (comm == nullptr || !s.lateComms().anyExpected() || s.comms().find(comm)) return;
    const LateComms::Claim claim = s.lateComms().claim(comm);
    if (claim.outcome == LateComms::Outcome::kFollowed) {
      registerDerivedComm(comm, claim.info);
      s.addStat("nccl_comms_followed_late", 1);
      return;
    }
    if (claim.outcome != LateComms::Outcome::kStranger) return;
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      logLine("a communicator made by ncclCommSplit or ncclCommShrink of a non-blocking communicator "
              "could not be followed (its handle was no longer where NCCL wrote it "
              "when it was first used): its calls are recorded without communicator id, rank or size");
    }
    s.addStat("nccl_comms_unfollowed", 1);
  } catch (...) {
  }
}

// After a split or shrink that makes a communicator for this rank, known by `info`. NCCL 2.28
// answers a non-blocking parent's with ncclSuccess and the slot still null (seen on an H100), so
// whether the handle is there says more than the result.
void followDerived(ncclComm_t* slot, const CommInfo& info) noexcept {
  if (slot == nullptr) return;
  if (ncclComm_t nc = __atomic_load_n(slot, __ATOMIC_ACQUIRE); nc != nullptr) {
    registerDerivedComm(nc, info);
  } else if (t_group_depth > 0) {
    try {
      if (promisedComms().size() < kMaxPromised) promisedComms().push_back({slot, info});
    } catch (...) {
    }
  } else {
    expectLate(slot, info);
  }
}

// At the outermost group end, after NCCL's: the handles it wrote for the group's splits and shrinks.
void followPromised() noexcept {
  for (const Promised& p : promisedComms()) {
    if (ncclComm_t nc = __atomic_load_n(p.slot, __ATOMIC_ACQUIRE); nc != nullptr) {
      registerDerivedComm(nc, p.info);
    } else {
      expectLate(p.slot, p.info);
    }
  }
  promisedComms().clear();
}

// A destroyed or aborted communicator: NCCL may give its address to a new one.
void forgetComm(ncclComm_t comm) noexcept {
  settleInProgress(comm, /*outputs=*/false);
  try {
    customRedOps().removeComm(comm);
    Session::get().comms().remove(comm);
    Session::get().lateComms().forget(comm);
  } catch (...) {
  }
}

// A PreMulSum operator NCCL has made: what it is, and the scalar's value where NCCL took it from
// the host (it read it before returning; the program's memory is still there until it returns).
void rememberPreMulSum(ncclRedOp_t op, const void* scalar, ncclDataType_t datatype,
                       ncclScalarResidence_t residence, ncclComm_t comm) noexcept {
  CustomRedOps::PreMulSum info;
  info.datatype = datatype;
  info.host = residence == ncclScalarHostImmediate && scalar != nullptr && ncclTypeBytes(datatype) > 0;
  if (info.host) info.scalar = CustomRedOps::packScalar(scalar, ncclTypeBytes(datatype));
  try {
    if (customRedOps().add(comm, op, info)) return;
    Session::get().addStat("nccl_redops_untracked", 1);  // past CustomRedOps::kMaxOps
  } catch (...) {
  }
}

int64_t uniqueIdHash(const ncclUniqueId& id) {
  return CommRegistry::idFromUniqueId(
      std::span(reinterpret_cast<const uint8_t*>(id.internal), sizeof id.internal));
}

}  // namespace
}  // namespace detrace::tracer

using namespace detrace::tracer;
using detrace::db::CollOp;

#define DETRACE_REAL(fn) static RealFn<decltype(&fn)> real(#fn, kNccl)

DETRACE_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream) {
  DETRACE_REAL(ncclAllReduce);
  Call c{CollOp::kAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, -1, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                              ncclDataType_t datatype, ncclRedOp_t op,
                                              ncclComm_t comm, cudaStream_t stream) {
  DETRACE_REAL(ncclReduceScatter);
  Call c{CollOp::kReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, -1, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm,
                                          cudaStream_t stream) {
  DETRACE_REAL(ncclAllGather);
  Call c{CollOp::kAllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, -1, -1, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream) {
  DETRACE_REAL(ncclBroadcast);
  Call c{CollOp::kBroadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, -1, root, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, int root,
                                       ncclComm_t comm, cudaStream_t stream) {
  DETRACE_REAL(ncclReduce);
  Call c{CollOp::kReduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
  DETRACE_REAL(ncclAlltoAll);
  Call c{CollOp::kAllToAll, "ncclAlltoAll", sendbuff, recvbuff, count, datatype, -1, -1, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, count, datatype, comm, stream);
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
// NCCL 2.28's gather and scatter (NCCL makes them sends and receives: its choices are p2p ones,
// which a collective's call does not take).
DETRACE_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  DETRACE_REAL(ncclGather);
  Call c{CollOp::kGather, "ncclGather", sendbuff, recvbuff, count, datatype, -1, root, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm, cudaStream_t stream) {
  DETRACE_REAL(ncclScatter);
  Call c{CollOp::kScatter, "ncclScatter", sendbuff, recvbuff, count, datatype, -1, root, -1, comm, stream};
  return forward(real, c, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
#endif

DETRACE_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, cudaStream_t stream) {
  DETRACE_REAL(ncclSend);
  Call c{CollOp::kSend, "ncclSend", sendbuff, nullptr, count, datatype, -1, -1, peer, comm, stream};
  return forward(real, c, sendbuff, count, datatype, peer, comm, stream);
}

DETRACE_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                     ncclComm_t comm, cudaStream_t stream) {
  DETRACE_REAL(ncclRecv);
  Call c{CollOp::kRecv, "ncclRecv", nullptr, recvbuff, count, datatype, -1, -1, peer, comm, stream};
  return forward(real, c, recvbuff, count, datatype, peer, comm, stream);
}

// Custom reduction operators (NCCL's PreMulSum): remembered per communicator, so that the
// collectives using one are recorded with what it is (describeRedOp).
DETRACE_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                     ncclScalarResidence_t residence, ncclComm_t comm) {
  DETRACE_REAL(ncclRedOpCreatePreMulSum);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclRedOpCreatePreMulSum");
  const ncclResult_t r = fn(op, scalar, datatype, residence, comm);
  if (r == ncclSuccess && op != nullptr) rememberPreMulSum(*op, scalar, datatype, residence, comm);
  return r;
}

// Forgotten once NCCL has destroyed it (its number may then be handed out again).
DETRACE_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  DETRACE_REAL(ncclRedOpDestroy);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclRedOpDestroy");
  const ncclResult_t r = fn(op, comm);
  if (r == ncclSuccess) {
    try {
      customRedOps().remove(comm, op);
    } catch (...) {
    }
  }
  return r;
}

// Groups: calls inside share a group id; NCCL launches the group's kernels at the outermost
// ncclGroupEnd, whose kernels take the group's first op as parent.
DETRACE_EXPORT ncclResult_t ncclGroupStart() {
  DETRACE_REAL(ncclGroupStart);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclGroupStart");
  if (t_group_depth++ == 0) {
    t_group_id = g_next_group.fetch_add(1);
    t_group_first_op = 0;
    t_group_calls = 0;
    t_group_unheld_recorded = 0;
    groupSeqs().clear();
    groupSeqRuns().clear();
  }
  return fn();
}

DETRACE_EXPORT ncclResult_t ncclGroupEnd() {
  DETRACE_REAL(ncclGroupEnd);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclGroupEnd");
  uint64_t parent = 0;
  if (t_group_depth > 0 && --t_group_depth == 0) parent = t_group_first_op;
  ncclResult_t result;
  {
    ParentScope scope(parent);
    InCall in_call;
    result = fn();
  }
  if (t_group_depth == 0) {
    groupSeqs().clear();
    groupSeqRuns().clear();
    settle(result);
    followPromised();
  }
  return result;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 22, 0)
// NCCL 2.22's simulated group end: NCCL estimates the group's time and runs none of its calls.
DETRACE_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  DETRACE_REAL(ncclGroupSimulateEnd);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclGroupSimulateEnd");
  const bool outermost = t_group_depth > 0 && --t_group_depth == 0;
  const ncclResult_t result = fn(simInfo);
  if (outermost) {
    discardSimulated();
    // NCCL runs a simulated group's async jobs (its inits, splits and shrinks: groupLaunch skips
    // only doLaunches), so its communicators are made and their handles written as at a real end.
    followPromised();
  }
  return result;
}
#endif

DETRACE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                             int rank) {
  DETRACE_REAL(ncclCommInitRank);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommInitRank");
  ncclResult_t r = fn(comm, nranks, commId, rank);
  if (r == ncclSuccess || r == ncclInProgress) {
    registerComm(comm ? *comm : nullptr, uniqueIdHash(commId), rank, nranks);
  }
  return r;
}

DETRACE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                   int rank, ncclConfig_t* config) {
  DETRACE_REAL(ncclCommInitRankConfig);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommInitRankConfig");
  ncclResult_t r = fn(comm, nranks, commId, rank, config);
  if (r == ncclSuccess || r == ncclInProgress) {
    registerComm(comm ? *comm : nullptr, uniqueIdHash(commId), rank, nranks);
  }
  return r;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
// NCCL 2.23's initialization from several roots: every rank passes the same nId unique ids.
DETRACE_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                     ncclUniqueId* commIds, ncclConfig_t* config) {
  DETRACE_REAL(ncclCommInitRankScalable);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommInitRankScalable");
  ncclResult_t r = fn(newcomm, nranks, myrank, nId, commIds, config);
  if ((r == ncclSuccess || r == ncclInProgress) && commIds != nullptr && nId > 0) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(commIds);
    const int64_t id = CommRegistry::idFromUniqueId(std::span(bytes, sizeof(ncclUniqueId) * static_cast<size_t>(nId)));
    registerComm(newcomm ? *newcomm : nullptr, id, myrank, nranks);
  }
  return r;
}
#endif

DETRACE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  DETRACE_REAL(ncclCommInitAll);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommInitAll");
  ncclResult_t r = fn(comms, ndev, devlist);
  if (r == ncclSuccess && comms != nullptr) {
    // One process drives every rank: the communicators share an id made from this call's number.
    static std::atomic<int64_t> calls{0};
    int64_t key[2] = {calls.fetch_add(1), ndev};
    int64_t id = CommRegistry::hashBytes(std::span(reinterpret_cast<const uint8_t*>(key), sizeof key));
    for (int i = 0; i < ndev; ++i) registerComm(comms[i], id, i, ndev);
  }
  return r;
}

DETRACE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                          ncclConfig_t* config) {
  DETRACE_REAL(ncclCommSplit);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommSplit");
  followLate(comm);  // a parent whose handle NCCL wrote late, split before any call on it
  ncclResult_t r = fn(comm, color, key, newcomm, config);
  if (r == ncclSuccess || r == ncclInProgress) {
    // Every parent rank calls split (color NCCL_SPLIT_NOCOLOR gives no communicator), so the
    // parent's split count advances on every rank alike.
    try {
      if (!Session::get().enabled()) return r;
      const CommInfo info = Session::get().comms().deriveSplit(comm, color);
      if (color != NCCL_SPLIT_NOCOLOR) followDerived(newcomm, info);
    } catch (...) {
    }
  }
  return r;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
// NCCL 2.27's shrink: the ranks that remain call it with the same list of excluded ranks.
DETRACE_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  DETRACE_REAL(ncclCommShrink);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommShrink");
  followLate(comm);  // as for a split
  ncclResult_t r = fn(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  if (r == ncclSuccess || r == ncclInProgress) {
    const size_t n = excludeRanksList != nullptr && excludeRanksCount > 0 ? static_cast<size_t>(excludeRanksCount) : 0;
    const std::span<const int32_t> excluded(excludeRanksList, n);
    try {
      if (Session::get().enabled()) followDerived(newcomm, Session::get().comms().deriveShrink(comm, excluded));
    } catch (...) {
    }
  }
  return r;
}
#endif

#if !defined(NCCL_REVOKE_DEFAULT)
// NCCL 2.28.9 has it, 2.28.3's header not: declared as NCCL documents it, so that the tracer built
// against the older header still wraps the newer NCCL a program brings (PyTorch's wheel).
DETRACE_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
#endif

// NCCL 2.28's revoke stops the communicator's calls in flight. Those still waiting for NCCL
// (ncclInProgress) are completed now without their outputs' fingerprints: what a stopped call
// leaves in its receive buffer is not its result, and the ncclSuccess NCCL answers once the
// communicator is quiet would otherwise have them taken. Outputs whose fingerprints were already
// enqueued behind a call that NCCL stops cannot be told apart; `detrace info` says the
// communicator was revoked (stats nccl_comms_revoked, nccl_calls_revoked).
DETRACE_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  DETRACE_REAL(ncclCommRevoke);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommRevoke");
  if (revokeFlags != 0) return fn(comm, revokeFlags);  // refused by NCCL (flags are reserved)
  // Before the real call: once it returns, another thread asking NCCL may hear the communicator
  // is quiet and take the stopped calls' outputs.
  const size_t stopped = settleInProgress(comm, /*outputs=*/false);
  const ncclResult_t r = fn(comm, revokeFlags);
  if (r == ncclSuccess || r == ncclInProgress) {  // not one NCCL refused (revoked already)
    Session::get().addStat("nccl_comms_revoked", 1);
    Session::get().addStat("nccl_calls_revoked", static_cast<int64_t>(stopped));
  }
  return r;
}

DETRACE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  DETRACE_REAL(ncclCommDestroy);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommDestroy");
  forgetComm(comm);
  return fn(comm);
}

DETRACE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  DETRACE_REAL(ncclCommAbort);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommAbort");
  forgetComm(comm);
  return fn(comm);
}

// A non-blocking communicator's state: once NCCL says it is ready, the calls on it that returned
// ncclInProgress have their kernels on their streams, and their outputs can be fingerprinted.
DETRACE_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  DETRACE_REAL(ncclCommGetAsyncError);
  auto fn = real.get();
  if (fn == nullptr) return missing("ncclCommGetAsyncError");
  const ncclResult_t r = fn(comm, asyncError);
  if (r == ncclSuccess && asyncError != nullptr && *asyncError != ncclInProgress) {
    const bool ok = *asyncError == ncclSuccess;
    settleInProgress(comm, /*outputs=*/ok, /*failed=*/!ok);
  }
  return r;
}
