// Per-thread caches of the TraceWriter's ids for what the program's threads name on every call:
// the streams they launch on and the constant strings the library wrappers intern (API names,
// compute types). TraceWriter::intern and ::stream take the writer's mutex, which the thread
// decoding activity records also takes; a hit here takes none. A writer's ids never change, and
// entries are keyed by the writer's address, which never names two writers: a process's writer
// lives until it ends (after fork the child leaks the parent's and makes its own).
#pragma once

#include <cstdint>

#include "detrace/db/writer.h"

namespace detrace::tracer {

// w.stream(handle, device), remembered for this thread's last few streams.
int64_t cachedStreamId(db::TraceWriter& w, int64_t handle, int32_t device);

// w.intern(text) for a string with static storage (a literal or a table entry): remembered by its
// address, so `text` must never change or be freed.
int64_t cachedConstantId(db::TraceWriter& w, const char* text);

// Forgets this thread's entries (at a capture start, where a new writer may have come).
void resetWriterIdCaches();

}  // namespace detrace::tracer
