// Committing the trace when the program is told to stop (SIGTERM, SIGINT, SIGHUP).
//
// Why: a program killed by a signal whose disposition is the default never runs atexit, so the
// last ~100 ms of events (and every launch still waiting for its GPU record) would be lost.
//
// How, without breaking the program:
//  - installSignalHandlers() runs when recording starts. For each signal it saves the program's
//    current action; a signal the program ignores (SIG_IGN, e.g. SIGHUP under nohup) is left
//    alone.
//  - The handler does only async-signal-safe work: it sends the signal number over a socket pair
//    (MSG_NOSIGNAL: never a SIGPIPE when its reader is gone). A dedicated thread (all signals
//    blocked) reads it and does the SQLite work, which may not run in a signal handler.
//  - The pair sits at high descriptor numbers and each end is checked before use (fstat,
//    async-signal-safe; base/held_fd.h): a program that closed them, or opened its own files on
//    their numbers, never gets a byte written to or read from its file. The handler then acts as
//    if there were no thread.
//  - Program's action was the default (terminate): the thread finishes the session (the same as
//    a normal exit), restores SIG_DFL and re-raises, so the process dies of the same signal with
//    the same exit status. At most kFinishTimeout is spent; a second signal kills at once.
//  - Program's action was its own handler (Python's SIGINT -> KeyboardInterrupt, an engine's
//    graceful shutdown): the handler chains to it at once, in signal context, as the program
//    expects, and the thread only commits (the recording goes on; the program's own exit path
//    finishes it).
//  - A process-group kill reaches a command of `detrace record` directly and again through
//    detrace forwarding it: detrace's copy (from DETRACE_LAUNCHER_PID) within a second of the
//    same signal from elsewhere is dropped before either action above, so the program sees the
//    signal once. Copies other parents pass on (torchrun's agent) are delivered as without it.
//  - A program that installs its own handler later simply replaces ours: nothing of the program
//    breaks; it then ends through its own exit path (atexit finishes the session).
//  - After fork(), the child's handlers pass signals straight to the saved actions until its own
//    recording starts and re-arms them (the parent's socket is never written from the child).
#pragma once

#include <signal.h>

#include <chrono>

namespace detrace::tracer {

// Blocks every signal in the calling thread for its scope: a thread the tracer starts inside it
// inherits that mask, so the host's signals always go to the host's own threads.
class SignalsBlockedScope {
 public:
  SignalsBlockedScope() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved_);
  }
  ~SignalsBlockedScope() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalsBlockedScope(const SignalsBlockedScope&) = delete;
  SignalsBlockedScope& operator=(const SignalsBlockedScope&) = delete;

 private:
  sigset_t saved_;
};

// Installs the handlers and starts the thread; idempotent; never throws.
void installSignalHandlers() noexcept;
// In a forked child: forget the parent's pipe and thread (installSignalHandlers re-arms).
void resetSignalsAfterFork() noexcept;
// Finishes the session on a thread of its own and waits for it at most `limit` (a wedged writer
// or a hung GPU must not keep a process that is ending alive); `when` names the occasion in the
// log line a timeout writes ("signal", "program's exit"). The finish waits for the GPU's work at
// most half of `limit` (Session::finish), so a kernel that never ends still leaves time to commit
// what the tracer holds. Without a thread, finishes unbounded.
void finishBounded(std::chrono::seconds limit, const char* when) noexcept;
// True once a finishBounded wait gave up: the finish still running must make no more CUDA or
// CUPTI calls (the process is tearing them down).
bool finishAbandoned() noexcept;

}  // namespace detrace::tracer
