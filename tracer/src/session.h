// Session: the tracer's per-process state inside the traced program.
//
// Rules for code in this library (it runs inside someone else's process):
//  - never throw across a C boundary: every entry point (CUPTI callback, NCCL/cuBLAS wrapper,
//    atexit/atfork handler) catches everything;
//  - never abort or exit the host, never block it on the recorder: the writer drops and counts;
//  - bounded memory: every queue and table has a cap, and what does not fit is counted;
//  - a tracer failure is logged once ("detrace: ...") and recording stops; the program goes on.
//
// The session starts lazily at the first CUDA or library activity (so a process that never uses
// the GPU leaves no file), creates RUN_DIR/proc-<pid>.dtrace and closes it at exit. After fork()
// the child starts over with its own file. With DETRACE_PAUSED=1 (`detrace record --paused`) it
// stays dormant, with no file, until `detrace attach` starts it (control.h); SIGTERM/SIGINT/SIGHUP
// and CUDA context teardown commit what was recorded (signals.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/records.h"
#include "detrace/db/writer.h"
#include "detrace/tracer/capture_policy.h"
#include "detrace/tracer/comm_registry.h"
#include "detrace/tracer/late_comms.h"
#include "detrace/tracer/reorder_buffer.h"
#include "detrace/tracer/window_gate.h"

namespace detrace::tracer {

class WriterSink;

class Session {
 public:
  // The process's session (created on first call; never destroyed, so it outlives every caller).
  static Session& get();

  // True if DETRACE_OUT_DIR is set and recording has not failed.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Starts recording if needed; the buffer, or nullptr when recording is off or failed.
  ReorderBuffer* buffer();
  // The writer (nullptr unless started): for interning strings and streams.
  db::TraceWriter* writer();
  CommRegistry& comms() { return comms_; }
  // Split or shrunk communicators whose handle NCCL writes later (non-blocking parents).
  LateComms& lateComms() { return late_comms_; }
  // What to capture (level, full-capture filters, window), from DETRACE_* at process start.
  const CapturePolicy& policy() const { return policy_; }
  // The recording window: every launch and library op asks it whether to record.
  WindowGate& gate() { return *gate_ptr_.load(std::memory_order_acquire); }
  // The deep window (`--deep`), fed the same launches, ops and NVTX ranges as gate(); nullptr
  // when deep mode is off.
  WindowGate* deepGate() { return deep_gate_.get(); }

  // ---- the capture switch: `detrace record --paused` and `detrace attach` (control.h) ----
  // Whether launches and library calls are recorded now; false while paused (DETRACE_PAUSED=1
  // until `attach start`). buffer() checks it first, so every callback returns at once.
  bool capturing() const { return capturing_.load(std::memory_order_acquire); }
  // How often capturing was started by `detrace attach ... start` (0 while it never was): what
  // was recorded before the last start may be older than what the program did since.
  uint64_t captureStarts() const { return capture_starts_.load(std::memory_order_acquire); }
  // CUPTI's side of the switch (set by the CUPTI adapter once CUPTI is up; applied at once).
  struct CaptureHooks {
    void (*start)() = nullptr;            // activity collection and launch callbacks on
    void (*stop_launches)() = nullptr;    // launch callbacks off
    void (*drain)() = nullptr;            // deliver the activity records collected so far
    void (*stop_activities)() = nullptr;  // activity collection off
  };
  void setCaptureHooks(const CaptureHooks& hooks);
  // Starts capturing (creating the trace file at the first start). `level` ("" keeps it) and
  // `window` (UNIT:A:B counted from now; "" = until stop) apply from now. Control thread only.
  Status startCapture(const std::string& level, const std::string& window);
  // Stops capturing: waits (at most ~2 s) for the GPU records of launches already made, writes
  // what is pending and commits it; the file stays open for the next start.
  Status stopCapture();
  // Sets the level or window while paused (the callbacks never see them change mid-flight).
  Status setCaptureLevel(CaptureLevel level);
  Status setWindow(const std::string& spec);
  struct CaptureState {
    bool capturing = false, started = false, finished = false, failed = false;
    std::string level, window, trace;
    std::string reason;  // why recording stopped, when `failed` (fail()'s what and detail)
    int64_t events = 0, dropped = 0;
    int32_t rank = -1, world_size = -1;
    bool committing = false;  // the last stop's commit did not end within its 2 s: still under way
  };
  CaptureState captureState();
  enum class Held { kSettle, kKeep };
  // Commits what has been recorded so far without ending the recording. At a context's teardown
  // (kSettle) the records of `context` (CUPTI's context id; 0: of every context) held back for
  // ordering are written too, with what is placed before them: no more records will come for
  // them; other contexts' later records, still running, stay held. On a signal the program
  // handles itself (kKeep) the recording goes on, and they stay held, so that records still on
  // their way keep their places and parents. Never throws.
  void commit(Held held = Held::kSettle, uint32_t context = 0) noexcept;
  // The buffer and writer if recording has started, starting nothing and ignoring the capture
  // switch: for delivering the GPU records of launches made while capturing.
  ReorderBuffer* startedBuffer();
  db::TraceWriter* startedWriter();
  // The writer's first error (a full disk, the file-size limit, a file that went away), whether
  // or not recording was stopped since; ok when it has none or recording never started.
  Status writerStatus() const;
  // True once recording started (a trace file was made), even if it failed since: finish() then
  // has a file to close.
  bool hasTrace() const { return started_.load(std::memory_order_acquire); }

  // Host timestamp in ns on the trace's clock (CUPTI's when CUPTI is loaded).
  int64_t now() const;
  void setClock(int64_t (*clock)()) { clock_.store(clock); }
  // Called first at finish(): the CUPTI adapter flushes its activity buffers here, waiting for
  // the GPU's work until the deadline it is given at most.
  using FlushHook = void (*)(std::chrono::steady_clock::time_point gpu_deadline);
  void setFlushHook(FlushHook hook) { flush_hook_.store(hook); }

  // Where /proc does not give the NVIDIA driver's version, asks NVML and records it (the trace's
  // `driver_version`). nvmlInit may take seconds: called on nvml_query.cc's thread only.
  void noteDriverVersion() noexcept;
  // Re-reads the widest communicator and updates the trace's rank row.
  void updateRank();
  // The device the process's GPU work runs on, learned from its first activity record (there may
  // be no current context when recording starts): fills the rank's device, GPU name and UUID once.
  void noteDevice(int32_t device);
  // Logs `what` once and stops recording; the program continues.
  // `what` (and `detail`, e.g. an exception's what()) are only logged: nothing is allocated, so it
  // can be called from a handler of std::bad_alloc.
  void fail(const char* what, const char* detail = nullptr) noexcept;
  // fail()s if the writer failed (a full disk, the file-size limit, a trace file that could not be
  // made), saying which; whether it had.
  bool failIfWriterFailed() noexcept;
  // Flushes everything pending, writes the counters and closes the file. Idempotent. Kernels
  // still running are waited for until `gpu_deadline` (their records come when they end); past
  // it, what they would have added is lost and the rest is still committed.
  void finish(std::chrono::steady_clock::time_point gpu_deadline);
  // Adds to a counter in the trace's stats table, once recording has started, whether capturing
  // or not: what is counted after a stop (CUPTI records dropped, NCCL calls completed late) still
  // concerns what was recorded. Starts nothing. Never throws (out of memory loses the count).
  void addStat(const char* key, int64_t delta) noexcept;
  // Sets a counter that its owner keeps as a total (db::TraceWriter::setStat); the same rules.
  void setStat(const char* key, int64_t value) noexcept;
  // Sets the tracer's own counters (the reorder buffer's tracer_*, the fingerprints', deep mode's)
  // in the trace's stats as totals, so that a process killed (SIGKILL, the OOM killer) keeps those
  // of its last second: called every second by CUPTI's flusher or the commit thread, and at
  // finish. Never throws; nothing before recording started or after finish.
  void publishStats() noexcept;

  // After fork(), in the child: drop the parent's state (its writer thread did not survive).
  static void resetAfterFork();

 private:
  Session();
  bool startLocked();
  void writeMetadataLocked();
  void describeDeviceLocked(int32_t device);
  void writeCountersLocked();  // publishStats' work but the fingerprints', under mu_ (finish's too)

  std::atomic<bool> enabled_{false};
  // fail()'s first reason, written without allocating, then published by reason_set_.
  char reason_[512] = {};
  std::atomic<bool> reason_set_{false};
  std::atomic<bool> started_{false};
  std::atomic<int64_t (*)()> clock_{nullptr};
  std::atomic<FlushHook> flush_hook_{nullptr};
  std::mutex mu_;
  std::mutex finish_mu_;  // one finish at a time: a signal's waits for the exit's (bounded)
  std::atomic<bool> device_known_{false};
  bool finished_ = false;
  // A child forked while its parent's writer was inside SQLite (db::sqliteInUse): SQLite's locks
  // may be held by a thread that does not exist here, so this process never records.
  bool forked_mid_write_ = false;
  std::string out_dir_;
  std::unique_ptr<db::TraceWriter> writer_;
  std::unique_ptr<WriterSink> sink_;
  std::unique_ptr<ReorderBuffer> buffer_;
  CommRegistry comms_;
  LateComms late_comms_;
  db::RankInfo rank_;
  std::vector<std::string> policy_problems_;  // logged when recording starts (declared first:
  CapturePolicy policy_;                      // policy_ is built from the environment into it)
  WindowGate gate_;
  const CaptureLevel recorded_level_ = policy_.level;  // `detrace record --capture`'s: an attach
                                                       // start without --capture goes back to it
  std::string levels_used_;  // the levels captured at so far, in order ("digest,meta"): meta "capture"
  const std::string& noteLevelLocked();  // adds the current level to levels_used_ (under mu_)
  std::unique_ptr<WindowGate> deep_gate_;  // set in the constructor, never changed
  // The gate in use: gate_, or one made by `attach start --window` (kept in attach_gates_ for
  // the life of the process, so a callback holding the old one never sees it freed).
  std::atomic<WindowGate*> gate_ptr_{&gate_};
  std::vector<std::unique_ptr<WindowGate>> attach_gates_;
  std::atomic<bool> capturing_{true};
  std::atomic<uint64_t> capture_starts_{0};
  std::atomic<bool> stop_commit_late_{false};  // the last stopCapture's flush timed out
  std::mutex capture_mu_;  // serialises start/stop/hooks (control thread vs. CUPTI setup)
  CaptureHooks hooks_;
  std::string window_spec_;
};

}  // namespace detrace::tracer
