// Deep window (`detrace record --deep WINDOW`): for each kernel launch inside the window, the
// launch's parameter layout and bytes, and a digest of every tracked device allocation one of its
// parameter words points into, taken on the launch's stream just before and just after the kernel.
// The diff then finds the first launch whose memory matched before and differed after.
//
// To know where pointers point, deep mode tracks the process's device allocations from the start
// (cuMemAlloc and its pitch/managed/async/pool forms, cuMemCreate + cuMemMap as PyTorch's
// expandable segments use, IPC and pool imports), and zero-fills memory fresh from the allocator
// (managed memory excepted) so that two runs start from the same bytes, until recording stops for
// good. Runtime-API calls (cudaMalloc, cudaLaunchKernel) are seen through the driver calls the
// runtime makes, which CUPTI reports too.
//
// Launch steps run on the program's launching thread, inside CUPTI callbacks: beginLaunch() when
// the deep gate admits a launch, driverEnter() at the driver launch API's entry (the nested one for
// a runtime launch), driverExit() at its exit. Everything is counted; nothing throws.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cupti.h>

#include "detrace/tracer/window_gate.h"

namespace detrace::db {
class TraceWriter;
}

namespace detrace::tracer::deep {

// Whether deep mode is on for this process (DETRACE_DEEP set and valid).
bool enabled();

// The driver API callbacks deep mode needs on from the start, and their handler.
const CUpti_CallbackId* memoryCallbacks(size_t& count);
bool isMemoryCallback(CUpti_CallbackId cbid);
void onMemoryApi(CUpti_CallbackId cbid, const CUpti_CallbackData* cb);

// The deep gate issued `ticket` for a launch, whatever becomes of that launch afterwards (captured
// into a graph, outside --window, a graph launch): a look-back window (kernel:NAME@N-B) that has
// just opened decides here which held launches to keep (look_back.h).
void noteTicket(const WindowGate::LaunchTicket& ticket);
// Recording stops (a capture stop): the look-back's held launches are dropped, so that the
// results queued after them are written.
void dropLookBack();
// The launch with reorder-buffer token `token` (launch index `index`) is in the deep window (this
// thread). `speculative`: a look-back window (kernel:NAME@N-B) has not opened yet; its results are
// held, and kept only if the window opens within B launches.
void beginLaunch(uint64_t token, int64_t index, bool speculative);
// A driver launch API is being entered on this thread for the launch with token `token`: if that
// is the deep launch pending here, fingerprint the memory its parameters reach and keep its
// parameter bytes.
void driverEnter(CUpti_CallbackId cbid, const void* params, uint64_t token);
// The driver launch API returned: fingerprint the same memory after the kernel (unless it failed).
void driverExit(bool failed);
// The outer (runtime) launch API returned: forget what is pending on this thread.
void endLaunch();
// A new capture epoch (attach start): nothing pending on this thread is valid any more.
void resetThread();
// A module is being unloaded: cached parameter layouts may name its functions.
void onModuleUnload();

// Sets deep mode's counters in the trace's stats (totals: written again every second and at the
// end, Session::publishStats).
void writeStats(db::TraceWriter& w);

}  // namespace detrace::tracer::deep
