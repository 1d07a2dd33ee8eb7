// TraceWriter: appends one process's events to a per-rank trace file.
//
// Design. Producers (the tracer's callbacks, on the engine's threads) only copy a record into an
// in-memory queue under a short mutex and get its sequence number back; a background thread drains
// the queue in batches, one SQLite transaction per batch, with prepared statements, in WAL mode.
// Every committed batch survives the process being killed (SIGKILL) at any moment. The queue is
// bounded: when it is full the writer either drops the record and counts it (kDrop, what the tracer
// uses: the engine must never wait on the recorder) or makes the producer wait (kBlock, for tools
// and benchmarks). If the disk fills or a write fails, the writer keeps the first error, stops
// writing, keeps counting what it drops, and reports the error from status()/flush()/close(); it
// never throws and never aborts its host.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "detrace/base/status.h"
#include "detrace/db/records.h"

namespace detrace::db {

enum class OverflowPolicy { kDrop, kBlock };

struct WriterOptions {
  size_t queue_capacity = size_t{1} << 18;          // events waiting to be written
  size_t cold_bytes_capacity = size_t{256} << 20;  // bytes of operands/captures waiting
  OverflowPolicy policy = OverflowPolicy::kDrop;
  std::chrono::milliseconds flush_interval{100};  // longest time a record waits before commit
  size_t batch_events = size_t{1} << 15;          // commit early once this many are queued
  bool overwrite = false;                          // replace an existing file at path
  int zstd_level = 3;                              // compression level of captured bytes
  int64_t max_pages = 0;  // if > 0, a cap on the file's 16 KiB pages: a quota (and full-disk tests)
  // Tests only: the writer's thread waits this long inside every batch's transaction.
  std::chrono::milliseconds hold_in_batch{0};
  // Create the file on the writer's thread, not the caller's: create() then touches no file, and
  // records queue (within the bounds above) until the file exists. A file that cannot be made is
  // then an error of status(), with opened() false. What a tracer inside someone else's program
  // uses: its first recorded call never waits on the file system.
  bool open_in_background = false;
  // Tests only: with open_in_background, the writer's thread waits this long before making it.
  std::chrono::milliseconds hold_before_open{0};
};

// Whether a thread of this process is inside SQLite for a trace writer now (creating its file,
// writing a batch, closing it). A child forked at such a moment must never call SQLite: that
// thread may have held SQLite's process-wide locks (its allocator's, its file layer's), and in the
// child no thread exists to release them. Async-signal-safe (an atomic load).
bool sqliteInUse() noexcept;

struct WriterCounters {
  int64_t events_written = 0;
  int64_t events_dropped = 0;
  int64_t operands_written = 0;
  int64_t operands_dropped = 0;
  int64_t bytes_captured = 0;  // uncompressed bytes of captured operands written
  int64_t launch_params_written = 0;
  int64_t launch_params_dropped = 0;
  int64_t strings_written = 0;  // interned strings committed (the reader checks none went missing)
  int64_t batches = 0;
};

class TraceWriter {
 public:
  // Creates a new trace file at `path` (schema version kSchemaVersion) and starts the writer
  // thread. Fails if the file exists unless options.overwrite (with options.open_in_background
  // the writer's thread creates it, and such a failure comes from status()).
  static Result<std::unique_ptr<TraceWriter>> create(const std::string& path,
                                                     const WriterOptions& options = {});
  ~TraceWriter();  // close()s, ignoring the result
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Metadata and identity; applied in the next batch (later values replace earlier ones).
  void setMeta(std::string key, std::string value);
  void setRank(const RankInfo& rank);
  // Interned string id for `text` (the same id every time). Cheap after the first call.
  int64_t intern(std::string_view text);
  // Registers a stream; returns its id (the same id for the same handle and device).
  int64_t stream(int64_t handle, int32_t device, int32_t priority = 0);

  // Appends an event; returns its sequence number, or nullopt if it was dropped (queue full under
  // kDrop, or the writer failed). `event.seq` is ignored.
  std::optional<int64_t> append(const Event& event);
  std::optional<int64_t> appendCollective(const Event& event, const Collective& collective);
  std::optional<int64_t> appendGemm(const Event& event, const Gemm& gemm);
  std::optional<int64_t> appendMarker(const Event& event, const Marker& marker);
  // Attaches an operand to an appended event (operand.seq). Returns false if it was dropped.
  bool appendOperand(Operand operand);
  // Stores a deep-window launch's parameters (params.seq: an appended kernel event). Queued like
  // an operand: never blocks under kDrop; false, and counted, if it was dropped. A second record
  // for the same seq replaces the first.
  bool appendLaunchParams(LaunchParams params);
  // Stores a graph replay's op (op.seq: an appended GEMM or collective event). Queued like an
  // operand; false if it was dropped (the caller counts). A second row for one seq replaces it.
  bool appendGraphOp(const GraphOp& op);

  // Adds `delta` to a counter in the stats table (e.g. recorder_overhead_ns).
  void addStat(std::string_view key, int64_t delta);
  // Sets a counter to `value` (a total its owner keeps, published again and again: a process
  // killed between two publications keeps the last). A key is either added to or set, never both.
  // A changed stat is committed at the next flush interval even without events.
  void setStat(std::string_view key, int64_t value);

  // Waits until everything appended so far is committed; returns the writer's status.
  Status flush();
  // The same, waiting at most `limit` (inside a traced program's own calls, e.g. at a CUDA context
  // teardown): kUnavailable past it, while the commit goes on in the background.
  Status flush(std::chrono::milliseconds limit);
  // Flushes, writes the final counters, checkpoints the WAL and closes. Idempotent.
  Status close();
  // The first error the writer hit, or ok.
  Status status() const;
  // Whether status() is an error, without taking the writer's lock (for a check on every drop).
  bool failed() const;
  // Whether the file was created (always, once create() returned, unless open_in_background).
  bool opened() const;
  WriterCounters counters() const;
  const std::string& path() const;

  class Impl;

 private:
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace detrace::db
