// Helpers shared by the LD_PRELOAD wrappers (NCCL, cuBLAS, cuBLASLt): recording a library op in
// API order and marking the kernels its call launches as its children.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "detrace/db/records.h"
#include "detrace/tracer/reorder_buffer.h"

#define DETRACE_EXPORT extern "C" __attribute__((visibility("default")))

namespace detrace::tracer {

// The token of the library op whose call is running on this thread (0: none). Launches seen by
// CUPTI on this thread take it as their parent.
uint64_t currentParent();

// Sets the current parent until changed again (annotate.cc's begin/end pairs; calls within one
// function use ParentScope).
void setCurrentParent(uint64_t token);

// Placement by correlation id (placement.h): the kernels launched between these two calls on this
// thread take op `token` as their parent (its call window; no-ops otherwise, and for token 0).
void openParentWindow(uint64_t token) noexcept;
void closeParentWindow(uint64_t token) noexcept;

// Sets the current parent for the duration of a wrapped call (and opens its window).
class ParentScope {
 public:
  explicit ParentScope(uint64_t token);
  ~ParentScope();
  ParentScope(const ParentScope&) = delete;
  ParentScope& operator=(const ParentScope&) = delete;

 private:
  uint64_t saved_;
  uint64_t token_;
};

// The op this thread recorded last, its place and the stream its kernels' records carry (the
// window that opens next for it starts there, with no marker call of its own, and takes records of
// that stream only; db::kUnset: of any).
void noteRecordedOp(uint64_t token, uint64_t position, int64_t record_stream) noexcept;

// Appends a library op to the process's trace; returns its token, 0 when not recording (or the
// recording window leaves it out). In full capture mode, marks the op for copies of its operands
// when the capture filters select it.
// `fill` completes the event and detail given the writer (to intern names and streams); it runs
// only when recording. With complete = false the op is held until ReorderBuffer::
// completeLibraryOp (NCCL's choices arrive during the call). Never throws.
// `api`: the library entry point's name ("cublasLtMatmul", "cublasGemmEx"), which --capture-ops
// can select GEMMs by (collectives are selected by their op, e.g. "AllReduce").
template <typename Fill>
uint64_t recordLibraryOp(Fill&& fill, bool complete = true, const char* api = nullptr) noexcept;

}  // namespace detrace::tracer

#include "diag_timing.h"
#include "fingerprinter.h"
#include "placement.h"
#include "session.h"
#include "log.h"

namespace detrace::tracer {

template <typename Fill>
uint64_t recordLibraryOp(Fill&& fill, bool complete, const char* api) noexcept {
  DiagScope timing(DiagSite::kLibraryOp);
  try {
    Session& s = Session::get();
    ReorderBuffer* buffer = s.buffer();
    db::TraceWriter* w = s.writer();
    if (buffer == nullptr || w == nullptr) return 0;
    if (WindowGate* deep = s.deepGate()) deep->admitOp();  // counts ops for ops:A:B deep windows
    WindowGate::OpTicket ticket = s.gate().admitOp();
    if (!ticket.record) return 0;
    // Filled where it is published from (no copy of the op on a library call's thread).
    auto owned = std::make_unique<LibraryOp>();
    LibraryOp& op = *owned;
    op.event.cpu_ns = s.now();
    op.position = markerCorrelation();  // 0 unless kernels are placed by correlation id
    {
      DiagScope fill_timing(DiagSite::kOpFill);
      if (!fill(*w, op)) return 0;
    }
    // What is read of the op after it is published (from then on the writer's side may move it).
    const uint64_t position = op.position;
    const int64_t record_stream = op.record_stream;
    const bool full = s.policy().level == CaptureLevel::kFull;
    std::string name;
    if (full) {
      const auto* c = std::get_if<db::Collective>(&op.detail);
      name = c != nullptr ? db::collOpName(c->op) : (api != nullptr ? api : "gemm");
    }
    const bool is_gemm = !std::holds_alternative<db::Collective>(op.detail);
    uint64_t token = 0;
    {
      DiagScope publish_timing(DiagSite::kOpPublish);
      // A call being captured into a CUDA graph: its template, which only the fingerprints of a
      // capture read (at --capture meta, a copy of the op for nothing).
      const bool note = s.policy().level != CaptureLevel::kMeta;
      if (note) Fingerprinter::noteOp(op);
      token = buffer->addLibraryOp(std::move(owned), currentParent(), complete);
      if (note) Fingerprinter::noteOpToken(token);
      noteRecordedOp(token, position, record_stream);
    }
    if (full && s.policy().capturesOp(ticket.index, is_gemm, name))
      Fingerprinter::get().markCopy(token);
    return token;
  } catch (const std::exception& e) {
    Session::get().fail("recording a library call failed", e.what());
  } catch (...) {
    Session::get().fail("recording a library call failed");
  }
  return 0;
}

}  // namespace detrace::tracer
