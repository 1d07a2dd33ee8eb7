// Fingerprints of library ops captured into CUDA graphs (the design is in fingerprinter.h). Runs
// inside the traced program like fingerprinter.cc: nothing allocated per op or per launch but
// bookkeeping (the device pool comes with the context, the results ring with the first executable
// graph that needs it), no waits on the GPU (one bounded wait on another thread's launch of the
// same graph: orderLaunchLocked), every skip counted.
//
// At capture (the op's call, on the capturing thread): the digest kernels go into the graph in
// their *Via form, reading their destination from the capture's cell (a device word) plus a fixed
// offset, the operands of one call batched into one launch (digestManyVia; one per alignment
// class). A GEMM whose call cannot change its inputs gets one node, after its kernels, for all its
// operands; the graph nodes its call created (CallNodeScope: CUPTI's GRAPHNODE_CREATED on the
// calling thread) and their copies in executable graphs (GRAPHNODE_CLONED, at instantiation) are
// noted, and the reorder buffer finds the op's replayed kernels by those node ids. Other ops (a
// GEMM that may overwrite an input, NCCL calls, whose kernel may be launched at the group's end)
// get a node before their kernels for their inputs and one after for their outputs, and are placed
// between their own kernels (so that a kernel of the program's between two captured calls is not
// taken for the second call's). At each
// launch of an executable graph holding such captures (the CUPTI launch callback, on the
// launching thread): one stream-ordered kernel stores each capture's share of a range of the
// pinned results ring into its cell, the graph runs, a second kernel stores 0 (a launch given no
// results then writes nothing), and an event marks the end. CUDA orders the executions of one
// executable graph, never the tracer's kernels around them: every launch the tracer sees, with
// results or not, waits on the GPU for the end of the one before it and marks its own
// (LaunchOrder, shared by the executable graphs made from the same captures), and a launch from
// another thread while one is between its begin and end waits (bounded) for that end
// (launch_gate.h). Two executable graphs made from one capture would share its cell: their
// replays get no fingerprints (counted as shared).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <variant>

#include <xxhash.h>

#include <time.h>

#include "fingerprinter.h"
#include "detrace/tracer/lasting_thread_local.h"
#include "env_setting.h"
#include "fingerprinter_state.h"
#include "log.h"
#include "relaxed_capture.h"
#include "self_launch.h"
#include "session.h"

namespace detrace::tracer {
namespace fp {

const char* replayLossName(ReplayLoss why) {
  switch (why) {
    case ReplayLoss::kLaunchFailed: return "launch_failed";
    case ReplayLoss::kExitUnseen: return "exit_unseen";
    case ReplayLoss::kOverlapped: return "overlapped";
    case ReplayLoss::kUnordered: return "unordered";
    case ReplayLoss::kUnclosed: return "unclosed";
    case ReplayLoss::kCellsUnset: return "cells_unset";
    case ReplayLoss::kNoContext: return "no_context";
    case ReplayLoss::kStreamGone: return "stream_gone";
    case ReplayLoss::kEndTimeout: return "end_timeout";
    case ReplayLoss::kEventError: return "event_error";
    case ReplayLoss::kTeardown: return "teardown";
    case ReplayLoss::kNone:
    case ReplayLoss::kCount: break;
  }
  return "other";
}

namespace {

constexpr size_t kMaxCapturedOps = 4096;                  // captured calls awaiting NCCL's choices
constexpr int64_t kReplayExitTimeoutNs = 10'000'000'000;  // a launch whose API exit never came
constexpr uint64_t kPoolDummySlot = 0;  // a DigestSlot no kernel touches (buffers <= 64 KiB)
constexpr uint64_t kPoolFirstFree = 32;
// Node ids kept per captured op (its call's nodes and their copies: one per executable graph made
// from its graph), and in all.
constexpr size_t kMaxOpNodeIds = 1024;
constexpr size_t kMaxNodeIds = size_t{1} << 20;

thread_local bool t_has_captured = false;  // this thread captured a call (amendCaptured's filter)
std::atomic<bool> g_has_node_ops{false};   // some captured op has graph node ids (noteNodeCloned)

int64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// `bytes` of the context's graph pool (8-byte aligned), or 0 when it is used up: a reclaimed
// cell or slot of that size first.
CUdeviceptr poolTake(Context& cx, uint64_t bytes) {
  std::vector<CUdeviceptr>* reclaimed = bytes == sizeof(uint64_t)              ? &cx.free_cells
                                        : bytes == sizeof(kernels::DigestSlot) ? &cx.free_slots
                                                                               : nullptr;
  if (reclaimed != nullptr && !reclaimed->empty()) {
    const CUdeviceptr p = reclaimed->back();
    reclaimed->pop_back();
    ++cx.graph_pool_reused;
    return p;
  }
  uint64_t at = (std::max(cx.graph_pool_used, kPoolFirstFree) + 7) & ~uint64_t{7};
  if (cx.graph_pool == 0 || at + bytes > kGraphPoolBytes) return 0;
  cx.graph_pool_used = at + bytes;
  return cx.graph_pool + at;
}

// The rows an operand's digests cover (0: the whole buffer only), as for eager digests.
uint32_t rowsOf(const OperandSpec& spec) {
  bool rows = spec.rows > 0 && spec.rows <= kMaxRows &&
              static_cast<uint64_t>(spec.row_bytes) <= kernels::kDigestRowBytesWithoutWorkspace;
  return rows ? static_cast<uint32_t>(spec.rows) : 0;
}

// Whether the environment variable `name` is set to `value` (the diagnostics' switches below).
bool envIs(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

// DETRACE_DIAG_GRAPH_NODES=1: each replayed op's graph node ids on stderr when its executable
// graph's templates are made (to compare with the node ids of the trace's kernel records).
bool diagGraphNodes() {
  static const bool on = envIs("DETRACE_DIAG_GRAPH_NODES", "1");
  return on;
}

// DETRACE_DIAG_GRAPH_WEIGHTS=0: a captured GEMM's inputs without rows larger than 64 KiB (its
// weight, under --row-digests tokens) get no digests, to time what digesting them at every
// replay costs. The trace then lacks them.
bool diagGraphWeights() {
  static const bool on = !envIs("DETRACE_DIAG_GRAPH_WEIGHTS", "0");
  return on;
}

// DETRACE_DIAG_GRAPH_EMPTY_NODES=1: a captured call's digest launches are replaced by one kernel
// that stores a zero to a word nobody reads, to time what a node costs a replay by itself,
// whatever it computes. The trace then lacks the captured calls' digests.
bool diagGraphEmptyNodes() {
  static const bool on = envIs("DETRACE_DIAG_GRAPH_EMPTY_NODES", "1");
  return on;
}

// DETRACE_DIAG_GRAPH_DEVICE_RESULTS=1: replays' digests go to device memory (half the graph
// pool, the same words at every replay) instead of the mapped host ring, to time what writing
// them across the bus costs each node. The trace's digests of replays are then not the GPU's.
CUdeviceptr diagDeviceResults(Context& cx, uint64_t words) {
  static const bool on = envIs("DETRACE_DIAG_GRAPH_DEVICE_RESULTS", "1");
  if (!on || words * 8 > kGraphPoolBytes / 2) return 0;
  if (cx.diag_device_results == 0) cx.diag_device_results = poolTake(cx, kGraphPoolBytes / 2);
  return cx.diag_device_results;
}

void logTemplate(size_t index, const GraphOpTemplate& t) {
  std::string ids;
  for (int64_t id : t.node_ids) ids += " " + std::to_string(id);
  logLine("graph op %zu: own kernels %d before, %d after; placed by %s; node ids:%s", index,
          t.own_before, t.own_after, t.by_nodes ? "nodes" : "own kernels", ids.c_str());
}

// The ops of an executable graph in replay order, with where each one's digests go. Rebuilt at
// later launches while some captured call has no sequence number yet (still in the reorder buffer
// at the first launch).
void buildTemplates(ExecInfo& e, TemplateSeqs& seqs) {
  auto templates = std::make_shared<GraphOpTemplates>();
  e.ops.clear();
  e.op_base.clear();
  e.seqs_known = true;
  for (size_t k = 0; k < e.captures.size(); ++k) {
    for (const auto& op : e.captures[k]->ops) {
      GraphOpTemplate t;
      t.op = op->op;
      t.template_token = op->token;
      const int64_t seq = seqs.get(op->token);  // kSeqDropped: the call is not in the trace
      e.seqs_known = e.seqs_known && seq != db::kUnset;
      t.template_seq = seq >= 0 ? seq : db::kUnset;
      t.own_before = op->own_before;
      t.own_after = op->own_after;
      t.node_ids.assign(op->node_ids.begin(), op->node_ids.end());
      t.by_nodes = op->by_nodes;
      t.refused = op->refused;
      if (diagGraphNodes()) logTemplate(templates->size(), t);
      templates->push_back(std::move(t));
      e.ops.push_back(op.get());
      e.op_base.push_back(e.capture_base[k]);
    }
  }
  e.templates = std::move(templates);
}

// Pins the results ring of a context (at the first executable graph that needs one): large
// enough for a few replays of that graph, DETRACE_GRAPH_RESULTS_MB if set.
void allocateGraphResults(Context& cx, uint64_t words) {
  const Driver& d = Driver::get();
  CUcontext current = nullptr;
  if (d.ctx_get(&current) != CUDA_SUCCESS || current != cx.ctx) return;  // try at the next one
  cx.graph_results_tried = true;
  uint64_t bytes =
      std::clamp<uint64_t>(4 * words * 8, kGraphResultsMinBytes, kGraphResultsMaxBytes);
  if (const int64_t mb = envNumber("DETRACE_GRAPH_RESULTS_MB", 0, 1, 65536, "the size the graphs ask for"); mb > 0) {
    bytes = static_cast<uint64_t>(mb) << 20;
  }
  RelaxedCaptureScope relaxed;  // another thread may be capturing a graph
  SelfLaunchScope self;         // the tracer's memory: not the program's (deep mode)
  void* host = nullptr;
  if (d.host_alloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS ||
      d.host_dev_ptr(&cx.graph_results_dev, host, 0) != CUDA_SUCCESS) {
    logLine("CUDA graph replays get no fingerprints: could not pin %llu MiB for their results",
            static_cast<unsigned long long>(bytes >> 20));
    return;
  }
  cx.graph_results = static_cast<volatile uint64_t*>(host);
  cx.graph_words = bytes / 8;
}

db::Operand replayedOperand(const CapturedOperand& c, int64_t seq, const volatile uint64_t* words,
                            db::TraceWriter& w) {
  const OperandSpec& spec = c.spec;
  db::Operand o;
  o.seq = seq;
  o.slot = spec.slot;
  o.name = w.intern(spec.name);
  o.role = spec.role;
  o.dtype = spec.dtype;
  o.shape = spec.shape.toVector();
  o.address = static_cast<int64_t>(spec.address);
  o.bytes = static_cast<int64_t>(spec.bytes);
  o.has_digest = true;
  if (c.rows > 0) {
    o.rows = spec.rows;
    o.row_bytes = spec.row_bytes;
    o.row_stride = spec.row_stride;
    o.row_digests.resize(c.rows);
    for (uint32_t i = 0; i < c.rows; ++i) o.row_digests[i] = words[c.offset + i];
    // As for eager digests: the whole digest of an operand with rows is XXH64 of its row digests.
    o.digest = XXH64(o.row_digests.data(), o.row_digests.size() * sizeof(uint64_t), c.rows);
  } else {
    o.digest = words[c.offset];
  }
  return o;
}

}  // namespace

// ---- templates' sequence numbers ----

void TemplateSeqs::expect(uint64_t token) {
  std::lock_guard lk(mu_);
  if (!seqs_.emplace(token, db::kUnset).second) return;
  order_.push_back(token);
  if (order_.size() > kMax) {
    seqs_.erase(order_.front());
    order_.pop_front();
  }
}

void TemplateSeqs::put(uint64_t token, int64_t seq) {
  std::lock_guard lk(mu_);
  if (seqs_.empty()) return;
  if (auto it = seqs_.find(token); it != seqs_.end()) it->second = seq;
}

int64_t TemplateSeqs::get(uint64_t token) {
  std::lock_guard lk(mu_);
  auto it = seqs_.find(token);
  return it == seqs_.end() ? db::kUnset : it->second;
}

LastOp& lastOp() {
  struct Tag;
  return lastingThreadLocal<LastOp, Tag>();
}

// ---- capture ----

bool State::captureLocked(uint64_t token, CUcontext ctx, CUstream stream,
                          const std::vector<OperandSpec>& specs, bool inputs, const CallNodes* nodes) {
  const Driver& d = Driver::get();
  auto cit = contexts.find(ctx);  // made now it would allocate during the capture: not here
  if (d.capture_info == nullptr || cit == contexts.end()) return false;
  Context& cx = *cit->second;
  if (cx.graph_pool == 0 || cx.graph_broken) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  if (d.capture_info(stream, &status, &id, &graph, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE || graph == nullptr) {
    return false;
  }
  // The captured call: its template (made from the call just recorded on this thread).
  CapturedOp* op = nullptr;
  if (auto it = captured_ops.find(token); it != captured_ops.end()) op = it->second;
  if (op == nullptr && lastOp().token != token) return false;
  Capture* cap = nullptr;
  if (auto it = captures.find(id); it != captures.end()) {
    cap = it->second.get();
  } else {
    CUdeviceptr cell = poolTake(cx, sizeof(uint64_t));  // zero: no replay running
    if (cell == 0) return false;
    auto made = std::make_unique<Capture>();
    made->id = id;
    made->ctx = &cx;
    made->graph = graph;
    made->cell = cell;
    made->graphs = 1;
    cap = made.get();
    captures.emplace(id, std::move(made));
    graph_captures[graph].push_back(cap);
  }
  if (op != nullptr && op->capture != cap) return false;  // its halves in two captures
  if (op == nullptr) {
    auto made = std::make_unique<CapturedOp>();
    made->capture = cap;
    made->token = token;
    made->op = lastOp().op;
    op = made.get();
    cap->ops.push_back(std::move(made));
    captured_ops[token] = op;
    captured_order.push_back(token);
    if (captured_order.size() > kMaxCapturedOps) {
      captured_ops.erase(captured_order.front());
      captured_order.pop_front();
    }
    template_seqs.expect(token);
    // Its call may have been written already (placement by launch callbacks writes a complete
    // op at the next drain, which may come before the capture of its digests after the call).
    if (const int64_t seq = seqs.get(token); seq != db::kUnset) template_seqs.put(token, seq);
    t_has_captured = true;
    ++graph_ops_captured;
  }
  if (nodes != nullptr) {
    op->by_nodes = op->by_nodes || nodes->all_after;
    for (uint64_t node : nodes->ids) addNodeLocked(*op, node);
  }
  SelfLaunchScope self;  // our kernels stay out of the trace
  // The operands' digests go into the graph in batches of up to kMaxBatch (digestManyVia): one
  // kernel node per batch and alignment class, usually one per captured call.
  std::vector<CapturedOperand> batch;
  std::vector<kernels::DigestRequest> requests;
  auto flush = [&] {
    if (batch.empty()) return;
    uint32_t launches = 0;
    Status st = Status::ok();
    if (diagGraphEmptyNodes()) {  // (diagnostics: a node of the same place that computes nothing)
      const auto* word = reinterpret_cast<const uint64_t*>(cx.graph_pool + kPoolDummySlot);
      const uint64_t zero = 0;
      st = cx.digester->storeWords(&word, &zero, 1, stream);
      launches = st.isOk() ? 1 : 0;
    } else {
      st = cx.digester->digestManyVia(requests.data(), static_cast<uint32_t>(requests.size()),
                                      reinterpret_cast<const uint64_t*>(cap->cell), stream, &launches);
    }
    for (CapturedOperand& c : batch) {
      // The words stay reserved even when the batch failed: the operands after it keep their
      // offsets, and a launch of the batch that did go in writes only into its own words.
      cap->words += c.rows > 0 ? c.rows : 1;
      if (!st.isOk()) {
        ++skipped_error;
        continue;
      }
      if (diagGraphEmptyNodes()) continue;  // no digests were made for it
      op->operands.push_back(std::move(c));
      ++graph_operands_captured;
    }
    (inputs ? op->own_before : op->own_after) += static_cast<int32_t>(launches);
    batch.clear();
    requests.clear();
  };
  uint64_t words_planned = cap->words;
  const int64_t weights_every = Session::get().policy().graph_weights_every;
  for (const OperandSpec& spec : specs) {
    CapturedOperand c;
    c.spec = spec;
    c.rows = rowsOf(spec);
    // A GEMM's weight (under --row-digests tokens): an input without rows, too long for one block.
    const bool weight = c.rows == 0 && spec.role == db::OperandRole::kInput &&
                        spec.bytes > kernels::kDigestRowBytesWithoutWorkspace &&
                        std::holds_alternative<db::Gemm>(op->op.detail);
    if (weight && !diagGraphWeights()) continue;  // (diagnostics: a weight left out)
    uint64_t words = c.rows > 0 ? c.rows : 1;
    if (words_planned + words > (uint64_t{1} << 31)) break;  // an absurd capture: the rest go
    kernels::DigestRequest r;
    r.base = spec.address;
    if (c.rows > 0) {
      r.rows = c.rows;
      r.row_bytes = static_cast<uint64_t>(spec.row_bytes);
      r.row_stride = static_cast<uint64_t>(spec.row_stride);
    } else {
      r.bytes = spec.bytes;
      CUdeviceptr slot = spec.bytes > kernels::kDigestRowBytesWithoutWorkspace
                             ? poolTake(cx, sizeof(kernels::DigestSlot))
                             : cx.graph_pool + kPoolDummySlot;
      if (slot == 0) {
        ++skipped_full;
        continue;
      }
      if (slot != cx.graph_pool + kPoolDummySlot) cap->slots.push_back(slot);
      r.slot = reinterpret_cast<kernels::DigestSlot*>(slot);
    }
    if (weight && weights_every > 1) {
      // Its own cell, pointed at the replay's results on sampled replays only (beginReplay).
      if (cap->weights_cell == 0) cap->weights_cell = poolTake(cx, sizeof(uint64_t));
      if (cap->weights_cell != 0) {
        r.out_cell = reinterpret_cast<const uint64_t*>(cap->weights_cell);
        c.sampled = true;
      }
    }
    c.offset = static_cast<uint32_t>(words_planned);
    r.out_offset = c.offset;
    words_planned += words;
    batch.push_back(std::move(c));
    requests.push_back(r);
    if (requests.size() == kernels::Digester::kMaxBatch) flush();
  }
  flush();
  return true;
}

void State::addNodeLocked(CapturedOp& op, uint64_t id) {
  if (op.node_ids.size() >= kMaxOpNodeIds || node_ops.size() >= kMaxNodeIds) {
    if (graph_node_ids_dropped++ == 0) {
      logLine("CUDA graph node ids past the tracer's bounds are not kept: replays of the graphs they "
              "belong to place their GEMMs among the replay's kernels less exactly");
    }
    return;
  }
  if (!node_ops.emplace(id, &op).second) return;  // a node is one op's
  op.node_ids.push_back(id);
  g_has_node_ops.store(true, std::memory_order_relaxed);
}

void State::forgetGraphsLocked(Context* cx) {
  std::erase_if(node_ops, [cx](const auto& kv) { return kv.second->capture->ctx == cx; });
  for (auto it = execs.begin(); it != execs.end();) {
    it = it->second->ctx == cx ? execs.erase(it) : std::next(it);
  }
  for (auto it = graph_captures.begin(); it != graph_captures.end();) {
    std::erase_if(it->second, [cx](const Capture* c) { return c->ctx == cx; });
    it = it->second.empty() ? graph_captures.erase(it) : std::next(it);
  }
  std::erase_if(captured_ops, [cx](const auto& kv) { return kv.second->capture->ctx == cx; });
  // Replays still queued hold their ExecInfo (and through it these captures): leak the captures.
  for (auto it = captures.begin(); it != captures.end();) {
    if (it->second->ctx == cx) {
      (void)it->second.release();
      it = captures.erase(it);
    } else {
      ++it;
    }
  }
}

void State::maybeRetireLocked(Capture& c) {
  if (c.graphs > 0 || c.execs > 0 || c.retired_ns != 0) return;
  c.retired_ns = monotonicNs();
  retired.push_back(c.id);
}

void State::reclaimCapturesLocked() {
  // Anything outside `execs` that holds an executable graph's bookkeeping (a queued replay, a
  // launch between its begin and end) may still reach its captures: wait until nothing does.
  if (retired.empty() || LiveExecCount::now() != static_cast<int64_t>(execs.size())) return;
  constexpr int64_t kRecycleAfterNs = 1'000'000'000;
  const int64_t now = monotonicNs();
  std::vector<uint64_t> later;
  for (uint64_t id : retired) {
    auto it = captures.find(id);
    if (it == captures.end()) continue;  // its context was torn down
    Capture& c = *it->second;
    if (c.graphs > 0 || c.execs > 0) {  // taken up again (a handle reused)
      c.retired_ns = 0;
      continue;
    }
    if (now - c.retired_ns < kRecycleAfterNs) {  // a destroyed graph may still be running
      later.push_back(id);
      continue;
    }
    for (const std::unique_ptr<CapturedOp>& op : c.ops) {
      for (uint64_t node : op->node_ids) {
        if (auto n = node_ops.find(node); n != node_ops.end() && n->second == op.get()) node_ops.erase(n);
      }
      if (auto t = captured_ops.find(op->token); t != captured_ops.end() && t->second == op.get()) {
        captured_ops.erase(t);
      }
    }
    Context& cx = *c.ctx;
    if (!cx.graph_leaked && !cx.graph_broken) {  // every replay's reset ran: cells and slots are zero
      cx.free_cells.push_back(c.cell);
      if (c.weights_cell != 0) cx.free_cells.push_back(c.weights_cell);
      cx.free_slots.insert(cx.free_slots.end(), c.slots.begin(), c.slots.end());
      if (c.order != nullptr && c.order.use_count() == 1 && c.order->done != nullptr) {
        cx.free_events.push_back(c.order->done);
      }
    }
    captures.erase(it);
    ++graph_captures_reclaimed;
  }
  retired = std::move(later);
}

// ---- replays: results ----

State::ReplayStep State::drainReplayLocked(Pending& p, bool final, db::TraceWriter* w) {
  Replay& r = *p.replay;
  if (r.failed) {
    countReplayLost(r.loss);
    return ReplayStep::kWritten;
  }
  if (!r.ended) {
    if (!final && monotonicNs() - r.begun_ns < kReplayExitTimeoutNs) return ReplayStep::kWait;
    // The launch's API exit never came (capture switched off in between): the digests may still
    // land in its words, and its cell may still point there. Give those up for good.
    r.leak = true;
    if (r.exec->order->gate.close(p.replay)) replay_ended.notify_all();
    if (!r.ctx->graph_broken) {
      r.ctx->graph_broken = true;
      logLine(
          "CUDA graph replays get no more fingerprints in this context: a replay's end was not "
          "seen");
    }
    countReplayLost(ReplayLoss::kEndTimeout);
    return ReplayStep::kWritten;
  }
  CUresult q = Driver::get().event_query(r.event);
  if (q == CUDA_ERROR_NOT_READY && !final) return ReplayStep::kWait;
  if (q != CUDA_SUCCESS) {
    r.leak = true;  // the graph may still be writing
    countReplayLost(ReplayLoss::kEventError);
    return ReplayStep::kWritten;
  }
  const ExecInfo& e = *r.exec;
  for (size_t i = 0; i < e.ops.size(); ++i) {
    if (seqs.get(r.first_token + i) == db::kUnset && !final) return ReplayStep::kWait;
  }
  writeReplayLocked(r, w, /*park=*/false);
  return ReplayStep::kWritten;
}

// The operands of an ended replay whose results have landed: written where their op has its
// sequence number; where it has none yet, parked in `awaiting` (`park`: the results' memory is
// about to go) or counted lost.
void State::writeReplayLocked(const Replay& r, db::TraceWriter* w, bool park) {
  const ExecInfo& e = *r.exec;
  const volatile uint64_t* words = r.ctx->graph_results + r.off;
  for (size_t i = 0; i < e.ops.size(); ++i) {
    const uint64_t token = r.first_token + i;
    const int64_t seq = seqs.get(token);
    if (e.ops[i]->refused) continue;  // no op of it is written: nothing of it is lost
    for (const CapturedOperand& c : e.ops[i]->operands) {
      const std::optional<uint64_t> weight = sampledWeightLocked(c, r, words + e.op_base[i]);
      // kSeqDropped / kSeqForgotten: the replayed op is not in the trace.
      const size_t bytes = sizeof(Awaiting) + c.rows * sizeof(uint64_t);
      const bool parks = park && seq == db::kUnset && awaiting_bytes + bytes <= kMaxAwaitingBytes;
      if (w == nullptr || (seq < 0 && !parks)) {
        ++lost;
        continue;
      }
      db::Operand o = replayedOperand(c, seq, words + e.op_base[i], *w);
      if (c.sampled) {
        o.has_digest = weight.has_value();
        o.digest = weight.value_or(0);
        if (!r.weights) ++(weight ? graph_weights_carried : graph_weights_missing);
      }
      if (parks) {
        parkLocked({token, bytes, std::move(o)});
      } else {
        (void)w->appendOperand(o);
        ++written;
      }
    }
  }
}

// A replay still queued when its context is torn down (a device reset, or the runtime's exit
// before the tracer's): its results are read now, while their memory lives, if its graph has
// ended; else it is lost. Under drain_mu and mu, in the teardown callback (its event is queried
// with the dying context current, as the drainer would: bench/tracer/cupti_teardown_probe found
// both calls answered there).
void State::settleReplayForTeardownLocked(Pending& p, db::TraceWriter* w) {
  Replay& r = *p.replay;
  const Driver& d = Driver::get();
  CUresult q = CUDA_ERROR_INVALID_VALUE;
  if (!r.failed && r.ended && r.event != nullptr && w != nullptr) {
    CUcontext callers = nullptr;
    const bool swap = d.ctx_get(&callers) == CUDA_SUCCESS && callers != r.ctx->ctx;
    if (swap) d.setCurrent(r.ctx->ctx);
    q = d.event_query(r.event);
    if (swap) d.setCurrent(callers);
  }
  if (q != CUDA_SUCCESS) {
    countReplayLost(r.failed ? r.loss : ReplayLoss::kTeardown);
    return;
  }
  writeReplayLocked(r, w, /*park=*/true);
  ++graph_replays_settled_at_teardown;
}

std::optional<uint64_t> State::sampledWeightLocked(const CapturedOperand& c, const Replay& r,
                                                   const volatile uint64_t* op_words) {
  if (!c.sampled) return std::nullopt;
  if (r.weights) {  // taken at this replay: kept for the replays until the next sample
    c.taken_exec = r.exec->serial;
    c.taken_replay = r.sample;
    c.taken_digest = op_words[c.offset];
    return c.taken_digest;
  }
  if (c.taken_exec == r.exec->serial && c.taken_replay == r.weights_from) return c.taken_digest;
  return std::nullopt;  // the sampled replay it carries from gave none (lost, skipped)
}

void State::releaseReplayLocked(Pending& p) {
  Replay& r = *p.replay;
  Context& cx = *r.ctx;
  if (r.leak) cx.graph_leaked = true;
  if (r.len > 0 && !r.leak) cx.graph_used -= r.skip + r.len;
  if (r.event != nullptr && !r.leak) cx.free_events.push_back(r.event);
  --pending_replays;
}

}  // namespace fp

using fp::State;
using fp::state;

namespace {

// The graph launch this thread is between the API enter and exit of, when the tracer ordered it:
// its graphs' order, its stream and, when it was given results, its replay.
struct ThreadLaunch {
  std::shared_ptr<fp::ExecInfo> exec;
  std::shared_ptr<fp::Replay> replay;
  std::shared_ptr<fp::Replay> gate;  // what holds its order's gate: `replay`, or a stand-in
  CUstream stream = nullptr;
  uint64_t stream_epoch = 0;  // streamEpoch() at its enter: `stream` may be gone if it moved
};
ThreadLaunch& threadLaunch() {
  struct Tag;
  return lastingThreadLocal<ThreadLaunch, Tag>();
}

std::atomic<bool> g_orders_launches{false};  // some executable graph holds captured digests

// How long a launch of an executable graph waits for another thread's launch of it to end
// (launch_gate.h). That launch is inside its launch call, which returns in microseconds unless the
// GPU's queue is full, when this one would wait in the driver too. DETRACE_DIAG_GRAPH_LAUNCH_WAIT_US
// sets it (for tests: 0 never waits; at most 10 s).
std::chrono::microseconds graphLaunchWait() {
  static const std::chrono::microseconds wait = [] {
    return std::chrono::microseconds(envNumber("DETRACE_DIAG_GRAPH_LAUNCH_WAIT_US", 50'000, 0, 10'000'000));
  }();
  return wait;
}

// The executable graph takes the order of its captures (the first one's; the others' are waited
// for as well). Under State::mu.
void adoptOrderLocked(fp::ExecInfo& e) {
  for (fp::Capture* c : e.captures) {
    if (!c->order) continue;
    if (!e.order) {
      e.order = c->order;
    } else if (c->order != e.order &&
               std::find(e.also_after.begin(), e.also_after.end(), c->order) == e.also_after.end()) {
      e.also_after.push_back(c->order);
    }
  }
  if (!e.order) e.order = std::make_shared<fp::LaunchOrder>();
  for (fp::Capture* c : e.captures) c->order = e.order;
  g_orders_launches.store(true, std::memory_order_release);
}

// Whether another executable graph reads one of its captures' cells too: then no launch of it is
// given results (nothing points the cells), and launches of the two need no gate between them.
bool sharedLocked(const fp::ExecInfo& e) {
  return std::any_of(e.captures.begin(), e.captures.end(), [](const fp::Capture* c) { return c->execs > 1; });
}

// The ordered launch in progress on this thread holds its order's gate until its end (a launch
// from another thread, which CUDA's rules forbid, waits for it): `holder` is its replay, or a
// stand-in when it has no results. Not while the captures are shared: different executable
// graphs may run at once, and none has results to protect.
void holdGateLocked(fp::ExecInfo& e, std::shared_ptr<fp::Replay> holder) {
  if (sharedLocked(e)) return;
  e.order->gate.open(holder, std::this_thread::get_id());
  threadLaunch().gate = std::move(holder);
}

// Whether the executable graph's context is still the tracer's (not destroyed meanwhile).
bool contextAliveLocked(State& s, const fp::Context* cx) {
  if (cx == nullptr) return false;
  auto alive = s.contexts.find(cx->ctx);
  return alive != s.contexts.end() && alive->second.get() == cx;
}

// No launch of these graphs gets results any more: one ran, or may have run, unordered against
// the launches that point their cells. The launch still open may have had its results written
// into: they are given up too. Under State::mu.
// `unordered`: the launch may also run before the last one's reset, which then goes too.
void giveUpLocked(fp::LaunchOrder& o, uint64_t serial, const char* why, bool unordered) {
  if (const std::shared_ptr<fp::Replay>& open = o.gate.openLaunch()) open->overlapped = true;
  if (std::shared_ptr<fp::Replay> last = o.last.lock(); unordered && last != nullptr && last->ended) {
    last->fail(fp::ReplayLoss::kUnordered);
    last->leak = true;
    if (last->ctx != nullptr) last->ctx->graph_leaked = true;
  }
  if (!o.given_up) {
    logLine("CUDA graph %llu: %s; the launches of its captured calls get no more fingerprints",
            static_cast<unsigned long long>(serial), why);
  }
  o.given_up = true;
}

// Under State::mu (`lk`), with the graph's context current, at the enter of any launch of `e` the
// tracer sees, whether or not it will get results: its graph's digest kernels read the cells
// either way (LaunchOrder).
//  - Another thread's launch whose end has not come yet (it may still point the cells after this
//    one's graph, or reset them under it) is waited for, at most graphLaunchWait(). If it does not
//    end in time, results are given up (giveUpLocked).
//  - The end of the last launch (its graph, and its reset) is waited for on the GPU, whatever the
//    stream: a stream's handle may come back for another stream, and waiting for an event already
//    reached costs the GPU nothing. If that wait cannot be issued, results are given up too.
// True when the launch may be given results.
bool orderLaunchLocked(State& s, fp::ExecInfo& e, CUstream stream, std::unique_lock<std::mutex>& lk) {
  fp::LaunchOrder& o = *e.order;
  if (!o.given_up) {
    using Entry = LaunchGate<std::shared_ptr<fp::Replay>>::Entry;
    const Entry entry = o.gate.enter(lk, s.replay_ended, graphLaunchWait(), std::this_thread::get_id());
    if (entry == Entry::kWaited) ++s.graph_replays_waited;
    if (entry == Entry::kTimedOut) {
      giveUpLocked(o, e.serial, "a launch from another thread did not end in time for this thread's launch",
                   /*unordered=*/false);
    }
  }
  if (!contextAliveLocked(s, e.ctx)) return false;  // destroyed while this one waited
  const fp::Driver& d = fp::Driver::get();
  auto after = [&](const fp::LaunchOrder& prev) {
    return !prev.done_recorded ||
           (d.stream_wait_event != nullptr && d.stream_wait_event(stream, prev.done, 0) == CUDA_SUCCESS);
  };
  const char* why = "a launch could not be ordered after the one before it";
  if (!after(o)) giveUpLocked(o, e.serial, why, true);
  for (const auto& other : e.also_after) {
    if (!after(*other)) {  // its end is recorded there too: that order is no longer kept either
      giveUpLocked(*other, e.serial, why, true);
      giveUpLocked(o, e.serial, why, true);
    }
  }
  return !o.given_up;
}

// Marks the end of the launch on `stream` (after its graph, and its reset if it had one) for the
// next launch of these graphs: in its order and in the others it waited for (the executable
// graphs on those wait for it in turn). Under State::mu, with the graph's context current.
void markEndLocked(fp::ExecInfo& e, CUstream stream) {
  const fp::Driver& d = fp::Driver::get();
  auto mark = [&](fp::LaunchOrder& o) {
    if (o.done == nullptr && d.event_create(&o.done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) o.done = nullptr;
    o.done_recorded = o.done != nullptr && d.event_record(o.done, stream) == CUDA_SUCCESS;
    if (!o.done_recorded) giveUpLocked(o, e.serial, "a launch's end could not be marked", true);
  };
  mark(*e.order);
  for (const auto& other : e.also_after) mark(*other);
}

// --graph-weights-every N (weight_sampling.h): called under State::mu just before the replay is
// queued, so the replays' numbers follow the drain's order.
void sampleWeightsLocked(fp::ExecInfo& e, fp::Replay& r) {
  const WeightSampler::Turn t =
      e.weights.next(Session::get().captureStarts(), Session::get().policy().graph_weights_every);
  r.sample = t.sample;
  r.weights_from = t.weights_from;
  r.weights = t.sampled();
}

}  // namespace

void Fingerprinter::noteOp(const LibraryOp& op) noexcept {
  fp::LastOp& last = fp::lastOp();
  last.token = 0;  // noteOpToken
  last.op = op;
}

void Fingerprinter::noteOpToken(uint64_t token) noexcept { fp::lastOp().token = token; }

void Fingerprinter::amendCaptured(uint64_t token,
                                  const std::function<void(LibraryOp&)>& update) noexcept {
  if (!fp::t_has_captured || token == 0 || !update) return;
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    if (auto it = s.captured_ops.find(token); it != s.captured_ops.end()) update(it->second->op);
  } catch (...) {
  }
}

void Fingerprinter::refuseCaptured(uint64_t token) noexcept {
  if (!fp::t_has_captured || token == 0) return;
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.captured_ops.find(token);
    if (it == s.captured_ops.end() || it->second->refused) return;
    it->second->refused = true;
    ++s.graph_ops_refused;
  } catch (...) {
  }
}

void Fingerprinter::noteGraphCloned(CUgraph original, CUgraph clone) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.graph_captures.find(original);
    if (it == s.graph_captures.end() || original == clone) return;
    std::vector<fp::Capture*> caps = it->second;
    for (fp::Capture* c : caps) ++c->graphs;
    std::vector<fp::Capture*>& was = s.graph_captures[clone];  // a reused handle: that one is gone
    for (fp::Capture* c : was) {
      --c->graphs;
      s.maybeRetireLocked(*c);
    }
    was = std::move(caps);
  } catch (...) {
  }
}

void Fingerprinter::noteNodeCloned(uint64_t original, uint64_t copy) noexcept {
  // Every node of every graph instantiated or cloned comes here: nothing to do (and no lock)
  // until some captured op has nodes.
  if (!fp::g_has_node_ops.load(std::memory_order_relaxed) || original == copy) return;
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.node_ops.find(original);
    if (it != s.node_ops.end()) s.addNodeLocked(*it->second, copy);
  } catch (...) {
  }
}

void Fingerprinter::noteExec(uint64_t exec, CUcontext ctx,
                             const std::vector<CUgraph>& graphs) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    if (auto old = s.execs.find(exec); old != s.execs.end()) {  // a reused handle
      for (fp::Capture* c : old->second->captures) {
        --c->execs;
        s.maybeRetireLocked(*c);
      }
      s.execs.erase(old);
    }
    auto e = std::make_shared<fp::ExecInfo>();
    e->handle = exec;
    e->serial = ++s.exec_serials;
    for (CUgraph g : graphs) {
      auto it = s.graph_captures.find(g);
      if (it == s.graph_captures.end()) continue;
      for (fp::Capture* c : it->second) {
        // One context's captures (CUPTI names the graph's context; if it does not, the first's).
        CUcontext want = ctx != nullptr ? ctx : e->captures.empty() ? c->ctx->ctx : e->ctx->ctx;
        if (c->ctx->ctx != want || c->ops.empty()) continue;
        if (e->captures.empty()) e->ctx = c->ctx;
        if (std::find(e->captures.begin(), e->captures.end(), c) != e->captures.end()) continue;
        e->capture_base.push_back(e->words);
        e->words += c->words;
        e->captures.push_back(c);
      }
    }
    if (e->captures.empty()) return;
    for (fp::Capture* c : e->captures) ++c->execs;
    adoptOrderLocked(*e);
    if (e->ctx->graph_results == nullptr && !e->ctx->graph_results_tried) {
      fp::allocateGraphResults(*e->ctx, e->words);
    }
    s.execs.emplace(exec, std::move(e));
  } catch (...) {
  }
}

void Fingerprinter::noteExecUpdated(uint64_t exec, CUgraph graph) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    if (auto old = s.execs.find(exec); old != s.execs.end()) {
      for (fp::Capture* c : old->second->captures) {
        --c->execs;
        s.maybeRetireLocked(*c);
      }
      s.execs.erase(old);
    }
    auto it = s.graph_captures.find(graph);
    if (it == s.graph_captures.end()) return;
    auto e = std::make_shared<fp::ExecInfo>();
    e->handle = exec;
    e->serial = ++s.exec_serials;
    e->updated = true;
    e->captures = it->second;
    if (e->captures.empty()) return;
    e->ctx = e->captures.front()->ctx;
    for (fp::Capture* c : e->captures) ++c->execs;  // their own executable graph now shares them
    adoptOrderLocked(*e);  // its launches get no results, but they run the captures' digests
    s.execs.emplace(exec, std::move(e));
  } catch (...) {
  }
}

bool Fingerprinter::noteExecNodeDisabled(uint64_t exec) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.execs.find(exec);
    if (it == s.execs.end() || it->second->updated) return false;
    it->second->updated = true;  // its launches still run the captures' digests, and get no results
    return true;
  } catch (...) {
    return false;
  }
}

void Fingerprinter::forgetExec(uint64_t exec) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.execs.find(exec);
    if (it == s.execs.end()) return;
    for (fp::Capture* c : it->second->captures) {
      --c->execs;
      s.maybeRetireLocked(*c);
    }
    s.execs.erase(it);
    s.reclaimCapturesLocked();
  } catch (...) {
  }
}

void Fingerprinter::forgetGraph(CUgraph graph) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.graph_captures.find(graph);
    if (it == s.graph_captures.end()) return;
    for (fp::Capture* c : it->second) {
      --c->graphs;
      s.maybeRetireLocked(*c);
    }
    s.graph_captures.erase(it);
    s.reclaimCapturesLocked();
  } catch (...) {
  }
}

bool Fingerprinter::planReplay(uint64_t exec, ReplayPlan& plan) noexcept {
  try {
    State& s = state();
    std::lock_guard lk(s.mu);
    auto it = s.execs.find(exec);
    if (it == s.execs.end() || it->second->updated) return false;
    fp::ExecInfo& e = *it->second;
    // While a captured call's seq is unknown, the templates are remade (a few launches at most).
    constexpr int64_t kMaxRebuilds = 64;
    if (!e.templates || (!e.seqs_known && e.launches < kMaxRebuilds)) {
      fp::buildTemplates(e, s.template_seqs);
    }
    if (e.templates->empty()) return false;
    plan.ops = e.templates;
    plan.exec = it->second;
    plan.replay = e.launches++;
    plan.comm_seqs.clear();
    for (size_t i = 0; i < e.ops.size(); ++i) {
      const auto* c = std::get_if<db::Collective>(&e.ops[i]->op.detail);
      if (c == nullptr || e.ops[i]->refused) continue;  // a refused call is no call on it
      if (plan.comm_seqs.empty()) plan.comm_seqs.assign(e.ops.size(), db::kUnset);
      // The replay is the collective's next call on its communicator, on every rank alike.
      const int64_t lane = CommRegistry::laneOf(c->op, c->peer);
      plan.comm_seqs[i] = Session::get().comms().nextSeqFor(c->comm_id, c->comm_rank, lane);
    }
    return true;
  } catch (...) {
    return false;
  }
}

void Fingerprinter::beginReplay(const ReplayPlan& plan, CUstream stream, uint64_t token) noexcept {
  try {
    abandonReplay();  // one this thread left open (its exit never came): ended now
    if (!plan.exec) return;
    State& s = state();
    std::unique_lock lk(s.mu);
    fp::ExecInfo& e = *plan.exec;
    if (!contextAliveLocked(s, e.ctx)) return;
    // The executable graph's context (a runtime launch's enter may come before the runtime made
    // its context current), the thread's own again after.
    fp::ContextScope scope(e.ctx->ctx);
    if (!scope.ok()) {
      giveUpLocked(*e.order, e.serial, "its context could not be made current to order a launch", true);
      ++s.graph_replays_unsupported;
      return;
    }
    const bool ordered = orderLaunchLocked(s, e, stream, lk);
    if (!contextAliveLocked(s, e.ctx)) return;
    // Its end is marked at its exit.
    threadLaunch() = {plan.exec, nullptr, nullptr, stream, streamEpoch()};
    holdGateLocked(e, std::make_shared<fp::Replay>());  // until it has results, a stand-in
    if (!ordered) {
      ++(e.order->given_up ? s.graph_replays_overlapped : s.graph_replays_unsupported);
      return;
    }
    if (token == 0) return;  // the launch is not in the trace (its slot was dropped)
    fp::Context& cx = *e.ctx;
    uint64_t words_now = 0;  // a capture that grew after instantiation: its layout moved
    for (const fp::Capture* c : e.captures) words_now += c->words;
    if (cx.graph_broken || cx.graph_results == nullptr || e.words == 0 || words_now != e.words) {
      ++s.graph_replays_unsupported;
      return;
    }
    for (const fp::Capture* c : e.captures) {
      if (c->execs > 1) {  // another executable graph reads the same cell
        ++s.graph_replays_shared;
        return;
      }
    }
    uint64_t off = 0, skip = 0;
    if (s.pending_replays >= fp::kMaxPendingReplays ||
        !fp::reserveRing(cx.graph_words, cx.graph_head, cx.graph_used, e.words, off, skip)) {
      ++s.graph_replays_ring_full;
      return;
    }
    auto r = std::make_shared<fp::Replay>();
    r->exec = plan.exec;
    r->ctx = &cx;
    r->first_token = token + 1;
    sampleWeightsLocked(e, *r);
    r->off = off;
    r->skip = skip;
    r->len = e.words;
    r->begun_ns = fp::monotonicNs();
    std::vector<const uint64_t*> cells;
    std::vector<uint64_t> values;
    const CUdeviceptr diag_dest = fp::diagDeviceResults(cx, e.words);
    for (size_t k = 0; k < e.captures.size(); ++k) {
      const uint64_t dest = diag_dest != 0 ? diag_dest + e.capture_base[k] * sizeof(uint64_t)
                                           : cx.graph_results_dev + (off + e.capture_base[k]) * sizeof(uint64_t);
      cells.push_back(reinterpret_cast<const uint64_t*>(e.captures[k]->cell));
      values.push_back(dest);
      if (e.captures[k]->weights_cell != 0) {  // the weights' digests: on sampled replays only
        cells.push_back(reinterpret_cast<const uint64_t*>(e.captures[k]->weights_cell));
        values.push_back(r->weights ? dest : 0);
      }
    }
    fp::Pending p;
    p.ctx = &cx;
    p.replay = r;
    s.pending.push_back(std::move(p));  // released in FIFO order, whatever happens below
    ++s.pending_replays;
    SelfLaunchScope self;
    if (!cx.digester
             ->storeWords(cells.data(), values.data(), static_cast<uint32_t>(cells.size()), stream)
             .isOk()) {
      // Some cells may point at its words (one launch per 30 cells): never hand them out again.
      r->fail(fp::ReplayLoss::kCellsUnset);
      r->ended = r->leak = true;
      cx.graph_broken = true;
      return;
    }
    ++s.graph_replays;
    holdGateLocked(e, r);
    e.order->last = r;
    threadLaunch().replay = r;
  } catch (...) {  // out of memory: threadLaunch() says what was done (its replay is set last)
  }
}

bool Fingerprinter::orderUnrecordedLaunch(uint64_t exec, CUstream stream) noexcept {
  if (!g_orders_launches.load(std::memory_order_relaxed)) return false;
  try {
    abandonReplay();
    State& s = state();
    std::unique_lock lk(s.mu);
    auto it = s.execs.find(exec);
    if (it == s.execs.end()) return false;  // no captured digests: nothing reads a cell
    std::shared_ptr<fp::ExecInfo> e = it->second;  // kept while the gate's wait lets go of mu
    if (!contextAliveLocked(s, e->ctx)) return false;
    fp::ContextScope scope(e->ctx->ctx);
    if (!scope.ok()) {
      giveUpLocked(*e->order, e->serial, "its context could not be made current to order a launch", true);
      return false;
    }
    (void)orderLaunchLocked(s, *e, stream, lk);
    if (!contextAliveLocked(s, e->ctx)) return false;
    threadLaunch() = {e, nullptr, nullptr, stream, streamEpoch()};
    holdGateLocked(*e, std::make_shared<fp::Replay>());
    return true;
  } catch (...) {  // out of memory: threadLaunch() says whether it was ordered
    return threadLaunch().exec != nullptr;
  }
}

bool Fingerprinter::ordersGraphLaunches() noexcept { return g_orders_launches.load(std::memory_order_acquire); }

void Fingerprinter::abandonReplay() noexcept {
  // The thread's next launch call has begun, so the call of the one left open has returned: its
  // graph is queued (or failed). It is ended now as its exit would have, its results given up
  // (whether its launch succeeded is not known) and its words never reused (its graph may still
  // be running).
  if (threadLaunch().exec) endLaunch(/*failed=*/true, /*abandoned=*/true);
}

void Fingerprinter::endReplay(bool failed) noexcept { endLaunch(failed, /*abandoned=*/false); }

void Fingerprinter::endLaunch(bool failed, bool abandoned) noexcept {
  try {
    ThreadLaunch current = std::exchange(threadLaunch(), {});
    if (!current.exec) return;
    const fp::Driver& d = fp::Driver::get();
    State& s = state();
    std::lock_guard lk(s.mu);
    fp::ExecInfo& e = *current.exec;
    fp::Replay* r = current.replay.get();
    if (current.gate && e.order->gate.close(current.gate)) s.replay_ended.notify_all();  // whatever happens below
    fp::ReplayLoss why = fp::ReplayLoss::kLaunchFailed;
    if (r != nullptr && (r->overlapped || abandoned)) {
      // A launch from another thread may have run after this one's without waiting for its end,
      // and written into these words, now or later; or its graph may still be running. Its
      // cells still get their reset below.
      failed = true;
      why = abandoned ? fp::ReplayLoss::kExitUnseen : fp::ReplayLoss::kOverlapped;
      r->leak = true;
    }
    if (!contextAliveLocked(s, e.ctx)) return;  // context gone
    if (abandoned && streamEpoch() != current.stream_epoch) {
      // Its stream may have been destroyed since (its handle even taken by another): nothing can
      // be queued after its graph, so the next launch cannot be ordered after it.
      giveUpLocked(*e.order, e.serial, "a launch whose end was not seen cannot be ordered", true);
      if (r != nullptr) {
        r->fail(fp::ReplayLoss::kStreamGone);
        r->leak = r->ended = true;
      }
      return;
    }
    fp::Context& cx = *e.ctx;
    fp::ContextScope scope(cx.ctx);
    if (!scope.ok()) {
      giveUpLocked(*e.order, e.serial, "its context could not be made current to end a launch", true);
      if (r != nullptr) {
        r->fail(fp::ReplayLoss::kNoContext);
        r->leak = r->ended = true;
      }
      return;
    }
    if (r == nullptr) {  // no results: only its end, for the next launch's order
      markEndLocked(e, current.stream);
      return;
    }
    SelfLaunchScope self;
    std::vector<const uint64_t*> cells;
    for (const fp::Capture* c : e.captures) {
      cells.push_back(reinterpret_cast<const uint64_t*>(c->cell));
      if (c->weights_cell != 0) cells.push_back(reinterpret_cast<const uint64_t*>(c->weights_cell));
    }
    std::vector<uint64_t> zeros(cells.size(), 0);
    bool reset = cx.digester
                     ->storeWords(cells.data(), zeros.data(), static_cast<uint32_t>(cells.size()),
                                  current.stream)
                     .isOk();
    CUevent ev = nullptr;
    if (!cx.free_events.empty()) {
      ev = cx.free_events.back();
      cx.free_events.pop_back();
    } else if (d.event_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      ev = nullptr;
    }
    bool marked = ev != nullptr && d.event_record(ev, current.stream) == CUDA_SUCCESS;
    r->event = marked ? ev : nullptr;
    if (ev != nullptr && !marked) cx.free_events.push_back(ev);
    r->ended = true;  // first: an end that cannot be marked gives this one up too
    markEndLocked(e, current.stream);
    if (!reset || !marked) {
      // The cells may still point at these words, or their end cannot be seen: never reuse them.
      r->fail(fp::ReplayLoss::kUnclosed);
      r->leak = true;
      if (!cx.graph_broken) {
        cx.graph_broken = true;
        logLine(
            "CUDA graph replays get no more fingerprints in this context: a replay could not be "
            "closed");
      }
    } else if (failed) {
      r->fail(why);  // no digests ran (or may be overwritten); its words are free after the reset
    }
  } catch (...) {
  }
}

}  // namespace detrace::tracer
