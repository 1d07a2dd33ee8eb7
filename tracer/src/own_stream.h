// The tracer's own non-blocking stream in the calling thread's current CUDA context, for work of
// its own (zeroing memory) that must not join the program's streams: a call on the legacy stream
// waits for every blocking stream of the context, and fails (breaking the capture) while another
// thread captures one into a graph. One per context, created at its first use and forgotten when
// the context is destroyed (its handle may come back for a new context); at most 1024 contexts at
// once. A fill on it waits for nothing of the program's, and waiting for it waits for nothing else.
#pragma once

#include <cuda.h>

namespace detrace::tracer {

// nullptr if no context is current or the stream cannot be made.
CUstream ownStream() noexcept;
// At the context's destruction (CUPTI's CONTEXT_DESTROY_STARTING): its stream goes with it.
void forgetOwnStream(CUcontext ctx) noexcept;

}  // namespace detrace::tracer
