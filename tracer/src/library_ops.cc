#include "library_ops.h"

#include "placement.h"
#include "session.h"

namespace detrace::tracer {
namespace {
thread_local uint64_t t_parent = 0;
thread_local uint64_t t_last_op = 0, t_last_position = 0;
thread_local int64_t t_last_stream = db::kUnset;

void addWindowEdge(uint64_t token, bool open) noexcept {
  if (token == 0 || !placementByRecords()) return;
  try {
    ReorderBuffer* buffer = Session::get().buffer();
    if (buffer == nullptr) return;
    // The op just recorded opens its window at its own place: no second marker call. Another
    // op's window (an NCCL group's, opened for its first op at the group's end) takes records of
    // any stream: the group's calls may name several.
    const bool last = open && token == t_last_op;
    const uint64_t position = last && t_last_position != 0 ? t_last_position : markerCorrelation();
    buffer->addWindowEdge(token, position, open, last ? t_last_stream : db::kUnset);
  } catch (...) {
  }
}
}  // namespace

uint64_t currentParent() { return t_parent; }
void setCurrentParent(uint64_t token) { t_parent = token; }

void noteRecordedOp(uint64_t token, uint64_t position, int64_t record_stream) noexcept {
  t_last_op = token;
  t_last_position = position;
  t_last_stream = record_stream;
}

void openParentWindow(uint64_t token) noexcept { addWindowEdge(token, true); }
void closeParentWindow(uint64_t token) noexcept { addWindowEdge(token, false); }

ParentScope::ParentScope(uint64_t token) : saved_(t_parent), token_(token) {
  if (token != 0) {
    t_parent = token;
    openParentWindow(token);
  }
}
ParentScope::~ParentScope() {
  if (token_ != 0) closeParentWindow(token_);
  t_parent = saved_;
}

}  // namespace detrace::tracer
