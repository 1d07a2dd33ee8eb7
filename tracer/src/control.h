// The traced process's end of `detrace attach`: a ControlServer (control_server.h) whose handler
// drives the Session's capture switch (Session::startCapture/stopCapture/captureState).
//
// The server starts once per recorded GPU process: at its first CUDA, NCCL or cuBLAS activity,
// paused or not (so `attach stop` also works on a normal recording); processes that never touch
// the GPU (shells, compilers) get no thread and no socket. DETRACE_CONTROL=0 turns it off. Where
// it cannot start (no private directory), one line says so and recording goes on.
//
// Files: the socket (control_protocol.h says where) and RUN_DIR/proc-<pid>.dtrace-control, one
// line "socket=<path>", so `detrace attach RUN_DIR` finds the process; written by a thread of its
// own, which startControl waits for 250 ms at most (the run directory may be on a stalled
// network file system, which must not hold up cuInit or the program's first recorded call for
// longer). Both are removed at exit (a SIGKILLed process leaves them; the client recognises a
// dead pid).
#pragma once

namespace detrace::tracer {

// Starts the server if it has not been tried yet in this process. Cheap after the first call
// (one atomic load): the capture switch calls it from the hot path while paused. Never throws.
void startControl() noexcept;
// Stops the server and removes the socket and the pointer file. Idempotent; never throws.
void stopControl() noexcept;
// In a forked child: the parent's server is not ours (its thread did not survive).
void resetControlAfterFork() noexcept;

}  // namespace detrace::tracer
