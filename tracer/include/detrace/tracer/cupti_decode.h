// What CUPTI hands the tracer, read into the tracer's own terms: which launch API a callback id
// is, what a launch's parameters name (stream, executable graph, function), and an activity
// record (kernel, memcpy, memset) as a reorder_buffer.h Activity. Pure functions of CUPTI's
// structs and the trace writer's string and stream tables, so the CPU tests build CUPTI's
// structs themselves and check every case (tests/tracer/cpu_cupti_decode_test.cc); the adapter
// (cupti_adapter.cc) only calls them. Needs CUPTI's headers, not its library.
#pragma once

#include <cuda.h>
#include <cupti.h>

#include <cstdint>

#include "detrace/db/records.h"
#include "detrace/tracer/reorder_buffer.h"

namespace detrace::db {
class TraceWriter;
}

namespace detrace::tracer {

// What kind of launch a callback id is.
struct LaunchKind {
  db::LaunchApi api = db::LaunchApi::kUnknown;
  bool graph = false;
};

// False for every callback id that is not a kernel or graph launch (and for other domains).
bool classifyLaunch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, LaunchKind& kind);

// What a launch API's parameters name: the stream, the executable graph (graph launches) and the
// launched function's handle (the host function pointer a runtime launch passes, or the driver's
// CUfunction), which names the kernel without reading its name's text. All zero for null
// parameters or a callback id classifyLaunch() refuses.
struct LaunchTarget {
  int64_t stream = 0;
  uint64_t graph_exec = 0;
  const void* function = nullptr;
};

LaunchTarget launchTarget(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params);

// The stream a graph launch's `stream` argument means for the tracer's own launches: 0 passed to
// a per-thread-default-stream entry point (the _ptsz callbacks) is that thread's stream.
CUstream launchStream(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, int64_t stream);

// The strings id of a kernel's demangled name (the mangled text where it does not demangle,
// "<unnamed kernel>" for none), remembered by `handle` where there is one (name_cache.h). Each
// writer has its cache: a new writer (after a fork) has its own string ids.
int64_t kernelName(db::TraceWriter& w, const char* mangled, const void* handle = nullptr);

// "memcpy HtoD", "memcpy DtoH", ...: the event name of a memcpy record's CUpti_ActivityMemcpyKind.
const char* memcpyName(uint8_t copy_kind);

// One activity record as an Activity. False for kinds the tracer does not record and for the
// tracer's own kernels outside graphs; the tracer's kernels inside a graph (captured digests)
// come back with `own` set and only their correlation id and GPU times.
bool decodeActivity(db::TraceWriter& w, const CUpti_Activity* record, Activity& out);

}  // namespace detrace::tracer
