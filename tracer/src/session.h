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
// the child starts over with its own file.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "detrace/db/records.h"
#include "detrace/db/writer.h"
#include "detrace/tracer/comm_registry.h"
#include "detrace/tracer/reorder_buffer.h"

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

  // Host timestamp in ns on the trace's clock (CUPTI's when CUPTI is loaded).
  int64_t now() const;
  void setClock(int64_t (*clock)()) { clock_.store(clock); }
  // Called first at finish(): the CUPTI adapter flushes its activity buffers here.
  void setFlushHook(void (*hook)()) { flush_hook_.store(hook); }

  // Re-reads the widest communicator and updates the trace's rank row.
  void updateRank();
  // The device the process's GPU work runs on, learned from its first activity record (there may
  // be no current context when recording starts): fills the rank's device, GPU name and UUID once.
  void noteDevice(int32_t device);
  // Logs `what` once and stops recording; the program continues.
  void fail(const std::string& what);
  // Flushes everything pending, writes the counters and closes the file. Idempotent.
  void finish();
  // Adds to a counter in the trace's stats table.
  void addStat(const char* key, int64_t delta);

  // After fork(), in the child: drop the parent's state (its writer thread did not survive).
  static void resetAfterFork();

 private:
  Session();
  bool startLocked();
  void writeMetadataLocked();
  void describeDeviceLocked(int32_t device);

  std::atomic<bool> enabled_{false};
  std::atomic<bool> started_{false};
  std::atomic<int64_t (*)()> clock_{nullptr};
  std::atomic<void (*)()> flush_hook_{nullptr};
  std::mutex mu_;
  std::atomic<bool> device_known_{false};
  bool finished_ = false;
  std::string out_dir_;
  std::unique_ptr<db::TraceWriter> writer_;
  std::unique_ptr<WriterSink> sink_;
  std::unique_ptr<ReorderBuffer> buffer_;
  CommRegistry comms_;
  db::RankInfo rank_;
};

}  // namespace detrace::tracer
