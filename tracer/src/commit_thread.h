// The periodic commit where CUPTI's flusher does not run.
//
// CUPTI's flusher thread (cupti_adapter.cc) is what moves a running process's records to the
// trace every ~100 ms: it reads CUPTI's buffers, moves finished ops from the reorder buffer to the
// writer, writes finished fingerprints and stops recording when the writer failed. It exists only
// once CUPTI is set up. Without it (another profiler holds CUPTI, CUPTI cannot be loaded, or the
// process never initialized CUDA) the LD_PRELOAD layer still records NCCL and cuBLAS calls (without
// fingerprints: cuptiFlusherRuns below); this thread commits them on the same period, so that a
// process killed (SIGKILL, the OOM killer) keeps what it did until ~200 ms before. Once CUPTI's
// flusher runs, this thread ends (or is never started): that one does it all.
#pragma once

namespace detrace::tracer {

// At the start of recording (Session::startLocked); idempotent; none where CUPTI's flusher already
// runs; never throws. The thread is made with every signal blocked.
void startCommitThread() noexcept;
// At finish, before the file is closed: ends the thread, waiting for a commit in progress (at most
// 1 s: a commit stalled longer is left to end by itself).
void stopCommitThread() noexcept;
// CUPTI's flusher runs from now on (cupti_adapter.cc's start()): the commit thread ends.
void cuptiFlusherStarted() noexcept;
// Whether CUPTI is set up in this process, its flusher running and its context-teardown callback
// on (decided at cuInit, before any library call can use CUDA). Fingerprints need that callback:
// their results live in memory of the op's context, which only it says is about to be freed.
bool cuptiFlusherRuns() noexcept;
// After fork(), in the child: the parent's thread did not survive; forget it (and its lock).
void resetCommitThreadAfterFork() noexcept;

}  // namespace detrace::tracer
