// TraceReader: reads one per-rank trace file without loading it all.
//
// Opening checks, in order, that the file exists, is an SQLite file, is a detrace trace
// (application_id) and has this detrace's schema version; each failure is one sentence saying what
// is wrong and what to do. Later reads of a damaged file return kCorrupt errors, never crash.
//
// Thread-safety: a TraceReader is one SQLite connection and is not thread-safe. Open one per
// thread (Run::openRank() does that); any number may read the same file at once.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detrace/base/scoped.h"
#include "detrace/base/status.h"
#include "detrace/db/records.h"

namespace detrace::db {

namespace detail {
inline void finalize(sqlite3_stmt* s) { sqlite3_finalize(s); }
inline void closeConnection(sqlite3* db) { sqlite3_close_v2(db); }
}  // namespace detail

// Streams events in sequence order. Usage: while (auto more = c.next(); more && *more) use(c.event());
class EventCursor {
 public:
  EventCursor() = default;
  // Advances to the next event: true if there is one, false at the end, or an error.
  Result<bool> next();
  const Event& event() const { return event_; }

 private:
  friend class TraceReader;
  EventCursor(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  sqlite3* db_ = nullptr;
  ScopedResource<sqlite3_stmt*, detail::finalize> stmt_;
  Event event_;
};

struct TimeSpan {
  int64_t first_ns = kUnset;  // earliest CPU or GPU timestamp
  int64_t last_ns = kUnset;   // latest
};

class TraceReader {
 public:
  static Result<std::unique_ptr<TraceReader>> open(const std::string& path);

  const std::string& path() const { return path_; }
  const RankInfo& rank() const { return rank_; }
  // Whether the writer closed the file: its final counters written and its WAL folded in. False
  // for a process that was killed, is still recording, or whose trace stopped on a write error
  // (a full disk, the file-size limit). Such a file holds every batch committed before; its
  // drop counters stop at the last commit.
  bool finished() const { return finished_; }
  const std::map<std::string, std::string>& meta() const { return meta_; }
  // The metadata value for `key`, or "" if absent.
  std::string metaValue(const std::string& key) const;
  // The interned string `id`; "" for kUnset, "<bad string id N>" for ids the file lacks.
  std::string str(int64_t id) const;
  // Number of string ids in use: valid ids are 1 .. stringCount().
  int64_t stringCount() const { return static_cast<int64_t>(strings_.size()) - 1; }
  const std::vector<StreamInfo>& streams() const { return streams_; }

  // Number of events (sequence numbers are 0 .. eventCount()-1). Numbers with gaps are checked
  // past 2^31 only (a count of every row); see checkDense.
  Result<int64_t> eventCount();
  Result<std::map<EventKind, int64_t>> countsByKind();
  // kCorrupt, naming the file, unless `rows` (every event row, e.g. countsByKind's sum) is
  // eventCount(): the numbering has no gap.
  Status checkDense(int64_t rows);
  Result<TimeSpan> timeSpan();
  Result<std::map<std::string, int64_t>> stats();

  // Random access by sequence number; kNotFound if there is no such event.
  Result<Event> event(int64_t seq);
  // Events with from <= seq < to, optionally of one kind, in sequence order.
  Result<EventCursor> events(int64_t from = 0, int64_t to = INT64_MAX,
                             std::optional<EventKind> kind = std::nullopt);

  // Details of one event, or nullopt if it has none of that type.
  Result<std::optional<Collective>> collective(int64_t seq);
  Result<std::optional<Gemm>> gemm(int64_t seq);
  Result<std::optional<Marker>> marker(int64_t seq);
  // All details of a type, by seq, in sequence order (library ops are few: thousands, not millions).
  Result<std::vector<std::pair<int64_t, Collective>>> collectives();
  Result<std::vector<std::pair<int64_t, Gemm>>> gemms(int64_t limit = INT64_MAX);
  // The details with from <= seq < to, in sequence order, one at a time (a long trace read in
  // chunks). An error from `fn` stops the scan and is returned.
  Status forEachCollective(int64_t from, int64_t to,
                           const std::function<Status(int64_t seq, const Collective&)>& fn);
  Status forEachGemm(int64_t from, int64_t to,
                     const std::function<Status(int64_t seq, const Gemm&)>& fn);
  // Rows of the gemms and collectives tables.
  Result<int64_t> gemmCount();
  Result<int64_t> collectiveCount();

  // The operands of an event, in slot order, without captured bytes (capture_bytes says whether
  // any were captured); captureBytes() decompresses one operand's bytes.
  Result<std::vector<Operand>> operands(int64_t seq);
  Result<std::vector<uint8_t>> captureBytes(int64_t operand_id);
  // Every operand of the trace, in (seq, slot) order, without captured bytes: one scan, for
  // analyses that need the fingerprints of all ops.
  Result<std::vector<Operand>> allOperands();
  // The same with only seq, slot, role, bytes, rows, digest and row_digests filled (no shape parsing):
  // what comparing runs needs, several times faster on large traces.
  Result<std::vector<Operand>> allOperandFingerprints();
  // The same, one operand at a time (nothing accumulated): `fn` may keep what it needs. An error
  // from `fn` stops the scan and is returned.
  Status forEachOperandFingerprint(const std::function<Status(Operand&)>& fn);
  // The same for the operands of events with from <= seq < to.
  Status forEachOperandFingerprint(int64_t from, int64_t to,
                                   const std::function<Status(Operand&)>& fn);

  // A deep-window launch's parameters, or nullopt if the launch has none recorded (also for traces
  // written before the launch_params table existed).
  Result<std::optional<LaunchParams>> launchParams(int64_t seq);
  // Every recorded launch's parameters, in sequence order, one at a time; nothing for traces
  // without the table. An error from `fn` stops the scan and is returned.
  Status forEachLaunchParams(const std::function<Status(const LaunchParams&)>& fn);

  // CUDA graph replays (GraphOp): the row of a replayed op, or nullopt if `seq` is not one (also
  // for traces written before the graph_ops table existed); every row in sequence order; and how
  // many replayed ops precede `seq` (library-op numbering counts calls, not replays).
  Result<std::optional<GraphOp>> graphOp(int64_t seq);
  Status forEachGraphOp(const std::function<Status(const GraphOp&)>& fn);
  Result<int64_t> graphOpsBefore(int64_t seq);

  // The few columns analysis walks over every event for, in sequence order.
  struct EventSkeleton {
    int64_t seq;
    EventKind kind;
    int64_t name;
    int64_t parent_seq;
  };
  Result<std::vector<EventSkeleton>> eventSkeletons();
  // The same, one event at a time, in sequence order; optionally only from <= seq < to.
  Status forEachEventSkeleton(const std::function<Status(const EventSkeleton&)>& fn);
  Status forEachEventSkeleton(int64_t from, int64_t to,
                              const std::function<Status(const EventSkeleton&)>& fn);

 private:
  TraceReader() = default;
  Status load();
  Result<sqlite3_stmt*> cached(int which, const char* sql);

  std::string path_;
  ScopedResource<sqlite3*, detail::closeConnection> db_;
  std::vector<ScopedResource<sqlite3_stmt*, detail::finalize>> cache_;
  RankInfo rank_;
  std::map<std::string, std::string> meta_;
  std::vector<std::string> strings_;  // index = id
  std::vector<StreamInfo> streams_;
  bool has_launch_params_ = false;  // older version-1 files lack the table
  bool has_graph_ops_ = false;      // likewise
  // The collectives and gemms tables' SELECT lists (NULL for columns older version-1 files lack),
  // and the lookups by seq made of them.
  std::string collective_columns_;
  std::string collective_by_seq_sql_;
  std::string gemm_columns_;
  std::string gemm_by_seq_sql_;
  bool finished_ = true;
};

}  // namespace detrace::db
