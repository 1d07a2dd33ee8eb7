// The annotation API of detrace/annotate.h: a program's own collective (a one-shot all-reduce over
// CUDA IPC buffers, say) recorded like an NCCL collective. The group is registered in the
// process's CommRegistry under a key of its own (one per comm_id), so it gets a communicator id
// equal on every rank, its own call numbering, and can define the process's rank like an NCCL
// communicator. In-process rules as for the NCCL wrappers: nothing throws out, nothing waits for
// the GPU, bad descriptions are logged once and not recorded.
#include <atomic>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "detrace/annotate.h"
#include "detrace/tracer/lasting_thread_local.h"
#include "fingerprinter.h"
#include "library_ops.h"
#include "next_symbol.h"

namespace detrace::tracer {
namespace {

// Begun, not yet ended, on this thread (innermost last).
struct Open {
  uint64_t token;
  uint64_t saved_parent;
  CUstream stream;
  std::vector<OperandSpec> outputs;
};
std::vector<Open>& openAnnotations() {
  struct Tag;
  return lastingThreadLocal<std::vector<Open>, Tag>();
}

void sayOnce(std::atomic<bool>& said, const char* what) {
  if (!said.exchange(true)) logLine("detrace_collective_begin: %s; such calls are not recorded", what);
}

// Why `c` cannot be recorded, or nullptr.
const char* invalid(const detrace_collective* c) {
  if (c == nullptr) return "a null description";
  if (c->struct_size < sizeof(detrace_collective)) return "struct_size is not sizeof(detrace_collective) (use DETRACE_COLLECTIVE_INIT)";
  if (c->op < DETRACE_ALLREDUCE || c->op > DETRACE_ALLGATHER) return "an unknown op";
  if (c->dtype < DETRACE_F32 || c->dtype > DETRACE_BF16) return "an unknown dtype";
  if (c->nranks < 1 || c->rank < 0 || c->rank >= c->nranks) return "a rank outside [0, nranks)";
  return nullptr;
}

db::CollOp collOp(int op) {
  switch (op) {
    case DETRACE_REDUCESCATTER: return db::CollOp::kReduceScatter;
    case DETRACE_ALLGATHER: return db::CollOp::kAllGather;
    default: return db::CollOp::kAllReduce;
  }
}

db::DType dtypeOf(int dtype) {
  switch (dtype) {
    case DETRACE_F16: return db::DType::kF16;
    case DETRACE_BF16: return db::DType::kBF16;
    default: return db::DType::kF32;
  }
}

// The registry key of an annotated group: an address no NCCL communicator can have (the top bit
// set is kernel space on x86-64 and arm64).
const void* groupKey(uint64_t comm_id) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(comm_id | (1ull << 63)));
}

// Registers the group on first use; the id mixes in a tag so it never equals an NCCL one.
void ensureGroup(const detrace_collective& c) {
  CommRegistry& comms = Session::get().comms();
  const void* key = groupKey(c.comm_id);
  if (comms.find(key)) return;
  const uint64_t words[2] = {c.comm_id, 0x616e6e6f74617465ull /* "annotate" */};
  CommInfo info{CommRegistry::hashBytes(std::span(reinterpret_cast<const uint8_t*>(words), sizeof words)),
                c.rank, c.nranks, currentDevice()};
  comms.add(key, info);
  if (Session::get().buffer() != nullptr) Session::get().updateRank();
}

uint64_t begin(const detrace_collective* c) noexcept {
  static std::atomic<bool> said{false};
  try {
    if (!Session::get().enabled()) return 0;
    if (const char* why = invalid(c)) {
      sayOnce(said, why);
      return 0;
    }
    ensureGroup(*c);
    const void* key = groupKey(c->comm_id);
    const int64_t seq = Session::get().comms().nextSeq(key);
    const std::string name = c->name != nullptr && *c->name != '\0' ? c->name : "annotated collective";
    std::vector<OperandSpec> specs;
    const uint64_t token = recordLibraryOp([&](db::TraceWriter& w, LibraryOp& op) {
      auto info = Session::get().comms().find(key);
      db::Event& e = op.event;
      e.kind = db::EventKind::kCollective;
      e.name = w.intern(name);
      e.device = info ? info->device : -1;
      e.stream = w.stream(reinterpret_cast<int64_t>(c->stream), e.device);
      db::Collective coll;
      coll.op = collOp(c->op);
      coll.dtype = dtypeOf(c->dtype);
      coll.count = static_cast<int64_t>(c->count);
      coll.redop = coll.op == db::CollOp::kAllGather ? db::RedOp::kNone : db::RedOp::kSum;
      if (info) coll.comm_id = info->id;
      coll.comm_rank = c->rank;
      coll.comm_nranks = c->nranks;
      coll.comm_seq = seq;
      coll.send_addr = reinterpret_cast<int64_t>(c->send);
      coll.recv_addr = reinterpret_cast<int64_t>(c->recv);
      op.detail = coll;
      specs = collectiveOperandSpecs(coll, lastGemmRowBytes());
      return true;
    }, /*complete=*/false);
    if (token == 0) return 0;
    auto stream = reinterpret_cast<CUstream>(c->stream);
    fingerprintOperands(token, stream, specs, /*inputs=*/true);
    Open open{token, currentParent(), stream, {}};
    for (const OperandSpec& s : specs) {
      if (s.role != db::OperandRole::kInput) open.outputs.push_back(s);
    }
    openAnnotations().push_back(std::move(open));
    setCurrentParent(token);
    openParentWindow(token);
    return token;
  } catch (...) {
    return 0;
  }
}

void end(uint64_t token) noexcept {
  try {
    // Ends `token` and any begun inside it that were never ended (their kernels are launched too);
    // a token this thread has not begun ends nothing.
    bool open_here = false;
    std::vector<Open>& opened = openAnnotations();
    for (const Open& o : opened) open_here = open_here || o.token == token;
    while (open_here && !opened.empty()) {
      Open open = std::move(opened.back());
      opened.pop_back();
      setCurrentParent(open.saved_parent);
      closeParentWindow(open.token);
      fingerprintOperands(open.token, open.stream, open.outputs, /*inputs=*/false);
      // startedBuffer(): an op begun while capturing is completed even if a stop came since (the
      // stop's drain waits for it); buffer() is null once capturing stops.
      if (ReorderBuffer* buffer = Session::get().startedBuffer()) buffer->completeLibraryOp(open.token);
      if (open.token == token) return;
    }
  } catch (...) {
  }
}

}  // namespace
}  // namespace detrace::tracer

DETRACE_EXPORT uint64_t detrace_collective_begin(const detrace_collective* c) {
  return detrace::tracer::begin(c);
}

DETRACE_EXPORT void detrace_collective_end(uint64_t token) { detrace::tracer::end(token); }
