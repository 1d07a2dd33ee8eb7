// The periodic commit where CUPTI's flusher does not run.
//
// CUPTI's flusher thread (cupti_adapter.cc) is what moves a running process's records to the
// trace every ~100 ms: it reads CUPTI's buffers, moves finished ops from the reorder buffer to the
// writer, writes finished fingerprints and stops recording when the writer failed. It exists only
// once CUPTI is set up. Without it (another profiler holds CUPTI, CUPTI cannot be loaded, or the
// process never initialized CUDA) the LD_PRELOAD layer still records NCCL and cuBLAS calls and
// takes fingerprints; this thread commits them on the same period, so that a process killed
// (SIGKILL, the OOM killer) keeps what it did until ~200 ms before, and the fingerprint rings are
// drained while the program runs. Once CUPTI's flusher runs, this thread ends: that one does it all.
// Before its first commit it asks NVML for the driver's version where /proc does not tell it
// (Session::noteDriverVersion: nvmlInit can take seconds, which no thread of the program's should
// wait), so it is started even where CUPTI's flusher already runs, and then ends at once.
#pragma once

namespace detrace::tracer {

// At the start of recording (Session::startLocked); idempotent; never throws. The thread is made
// with every signal blocked.
void startCommitThread() noexcept;
// At finish, before the file is closed: ends the thread, waiting for a commit in progress (at most
// 1 s: a thread still waiting on NVML is left to end by itself).
void stopCommitThread() noexcept;
// CUPTI's flusher runs from now on (cupti_adapter.cc's start()): the commit thread ends.
void cuptiFlusherStarted() noexcept;
// After fork(), in the child: the parent's thread did not survive; forget it (and its lock).
void resetCommitThreadAfterFork() noexcept;

}  // namespace detrace::tracer
