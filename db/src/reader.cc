#include "detrace/db/reader.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "detrace/db/schema.h"
#include "row_codec.h"
#include "sqlite_util.h"
#include "zstd_util.h"

namespace detrace::db {
namespace {

// kCorrupt unless `rows` event rows are numbered 0 .. `highest` with no gap.
Status numberingHasNoGap(const std::string& path, int64_t rows, int64_t highest) {
  if (rows == highest + 1) return Status::ok();
  return makeError(ErrorCode::kCorrupt,
                   "{} holds {} events numbered up to {}: the numbering has gaps, so the file is "
                   "damaged; re-record the run",
                   path, rows, highest);
}

// Checks the first bytes before handing the file to SQLite, so that a text file, an empty file or
// random bytes get a plain sentence rather than an SQLite error code.
// `wal`: the header says WAL mode (file format versions 2 at bytes 18 and 19): a trace the
// writer has not closed, whose commits since the last checkpoint are in its -wal file.
Status checkHeader(const std::string& path, bool& wal) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {  // e.g. a directory without search permission
    return makeError(ErrorCode::kIo, "cannot read {}: {}", path, ec.message());
  }
  if (ec || !std::filesystem::exists(status)) {
    return makeError(ErrorCode::kNotFound, "{} does not exist", path);
  }
  if (std::filesystem::is_directory(status)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "{} is a directory; open it as a run (detrace commands accept run directories)",
                     path);
  }
  if (!std::filesystem::is_regular_file(status)) {  // a FIFO would block the read below
    return makeError(ErrorCode::kNotATrace,
                     "{} is not a regular file (a pipe or a device?); pass a .dtrace file or a run "
                     "directory",
                     path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError(ErrorCode::kIo, "cannot read {} (permission denied?)", path);
  std::array<char, 100> header{};  // SQLite's file header
  in.read(header.data(), header.size());
  const std::streamsize got = in.gcount();
  if (got == 0) {
    return makeError(ErrorCode::kNoData,
                     "{} is empty: the recording wrote nothing (was it killed before it started?)",
                     path);
  }
  if (got < 16 || std::memcmp(header.data(), "SQLite format 3", 16) != 0) {
    return makeError(ErrorCode::kNotATrace,
                     "{} is not a detrace trace (not an SQLite file); pass a run directory made "
                     "by `detrace record` or one of its .dtrace files",
                     path);
  }
  if (got < static_cast<std::streamsize>(header.size())) {
    // With a -wal beside it, commits may be there: damaged, not a file that never held anything.
    std::error_code no_wal;
    const bool wal_data = std::filesystem::file_size(path + "-wal", no_wal) > 0 && !no_wal;
    return makeError(wal_data ? ErrorCode::kCorrupt : ErrorCode::kNoData,
                     "{} is cut short ({} bytes, less than an SQLite header): a copy or a disk "
                     "stopped early; copy it again from where it was recorded",
                     path, got);
  }
  wal = header[18] == 2 && header[19] == 2;
  return Status::ok();
}

Result<int64_t> pragmaInt(sqlite3* db, const char* pragma) {
  DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db, fmt::format("PRAGMA {}", pragma)));
  int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) return sqliteStatus(db, rc, fmt::format("reading PRAGMA {}", pragma));
  return sqlite3_column_int64(s.get(), 0);
}

// The tables the file has (0 for a file whose first commit never happened); -1 if unreadable.
int64_t tableCount(sqlite3* db) {
  auto n = [&]() -> Result<int64_t> {
    DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db, "SELECT count(*) FROM sqlite_master"));
    if (sqlite3_step(s.get()) != SQLITE_ROW) return int64_t{-1};
    return sqlite3_column_int64(s.get(), 0);
  }();
  return n.isOk() ? *n : -1;
}

Result<std::string> pragmaText(sqlite3* db, const char* pragma) {
  DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db, fmt::format("PRAGMA {}", pragma)));
  int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) return sqliteStatus(db, rc, fmt::format("reading PRAGMA {}", pragma));
  return colText(s.get(), 0);
}

// Runs `sql` and calls row(stmt) for each row.
template <typename F>
Status forEachRow(sqlite3* db, const std::string& sql, F&& row) {
  DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db, sql));
  for (;;) {
    int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) return Status::ok();
    if (rc != SQLITE_ROW) return sqliteStatus(db, rc, fmt::format("reading \"{:.50}\"", sql));
    DETRACE_RETURN_IF_ERROR(row(s.get()));
  }
}

// The strings table must hold every name the trace's rows refer to. Rows are committed with the
// strings they name, so a shortfall means rows were deleted: names would then print as
// "<bad string id N>" and lookups by name (an operand's "A", "send") fail with misleading errors.
// Checked against the writer's count (stats.strings_written) where the file has one; in older
// files, only an empty table under events.
Status checkStringsKept(sqlite3* db, int64_t held) {
  int64_t written = -1;
  DETRACE_RETURN_IF_ERROR(
      forEachRow(db, "SELECT value FROM stats WHERE key = 'strings_written'", [&](sqlite3_stmt* s) {
        written = sqlite3_column_int64(s, 0);
        return Status::ok();
      }));
  if (written > held) {
    return makeError(ErrorCode::kCorrupt,
                     "the strings table holds {} of the {} names written to it (rows were "
                     "deleted); the file is damaged: record the run again",
                     held, written);
  }
  if (written < 0 && held == 0) {
    bool any_event = false;
    DETRACE_RETURN_IF_ERROR(forEachRow(db, "SELECT 1 FROM events LIMIT 1", [&](sqlite3_stmt*) {
      any_event = true;
      return Status::ok();
    }));
    if (any_event) {
      return makeError(ErrorCode::kCorrupt,
                       "the strings table is empty but events refer to it (its rows were "
                       "deleted); the file is damaged: record the run again");
    }
  }
  return Status::ok();
}

// The names of the columns `table` has in this file (none where it has no such table).
Result<std::set<std::string>> presentColumns(sqlite3* db, std::string_view table) {
  std::set<std::string> present;
  DETRACE_RETURN_IF_ERROR(
      forEachRow(db, fmt::format("PRAGMA table_info({})", table), [&](sqlite3_stmt* s) {
        present.insert(colText(s, 1));  // the column's name
        return Status::ok();
      }));
  return present;
}

// The SELECT list of `table`'s declared columns, with NULL in place of those added within schema
// version 1 that the file lacks (ColumnDef::added_later; any other missing one failed checkSchema).
Result<std::string> presentColumnList(sqlite3* db, std::string_view table) {
  DETRACE_ASSIGN_OR_RETURN(const std::set<std::string> present, presentColumns(db, table));
  std::string out;
  for (const ColumnDef& c : schemaTable(table).columns) {
    if (!out.empty()) out += ", ";
    const bool missing = c.added_later && present.count(c.name) == 0;
    out += missing ? fmt::format("NULL AS {}", c.name) : std::string(c.name);
  }
  return out;
}

// Every table of the schema is there with every column, but for those added within schema version
// 1 (launch_params and graph_ops, and columns marked added_later), which older files lack. A file
// without one is damaged (or edited by hand): said here, at open, rather than as an SQL error by
// the first query that needs it.
Status checkSchema(sqlite3* db) {
  for (const TableDef& t : schemaTables()) {
    const std::string_view name = t.name;
    const bool optional = name == "launch_params" || name == "graph_ops";
    DETRACE_ASSIGN_OR_RETURN(const std::set<std::string> present, presentColumns(db, t.name));
    if (present.empty()) {
      if (optional) continue;
      return makeError(ErrorCode::kCorrupt,
                       "its {} table is missing: the file is damaged (or was edited); record the "
                       "run again",
                       t.name);
    }
    for (const ColumnDef& c : t.columns) {
      if (c.added_later || present.count(c.name) != 0) continue;
      return makeError(ErrorCode::kCorrupt,
                       "its {} table lacks the column {}: the file is damaged (or was edited); "
                       "record the run again",
                       t.name, c.name);
    }
  }
  return Status::ok();
}

// SELECT of a details table's columns (`cols`, seq first), for one seq or for all.
std::string detailSql(std::string_view cols, std::string_view table, bool one) {
  return fmt::format("SELECT {} FROM {}{}", cols, table, one ? " WHERE seq = ?" : " ORDER BY seq");
}

enum CachedStmt { kEventBySeq, kCollectiveBySeq, kGemmBySeq, kMarkerBySeq, kOperandsBySeq,
                  kCaptureById, kLaunchParamsBySeq, kGraphOpBySeq, kCachedCount };

}  // namespace

Result<bool> EventCursor::next() {
  if (!stmt_) return false;
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_DONE) {
    stmt_.reset();
    return false;
  }
  if (rc != SQLITE_ROW) return sqliteStatus(db_, rc, "reading events");
  event_ = readEvent(stmt_.get());
  return true;
}

namespace {

// Why an unfinished trace (WAL mode) cannot be read, where SQLite's own words ("unable to open
// database file", "no committed data") would mislead: its -wal, where its last commits are, was
// left behind by a copy; or reading it needs an index (-shm) beside it that this user cannot make.
// `wal_was_there`: whether the -wal existed before SQLite opened the file (a reader may create an
// empty one).
Status unfinishedTraceProblem(const std::string& path, const Status& error, bool empty, bool wal_was_there) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string wal = path + "-wal";
  const fs::path dir = fs::absolute(path, ec).parent_path();
  const bool writable = ::access(dir.c_str(), W_OK) == 0;
  if (!wal_was_there) {
    if (empty || !writable) {  // !writable: SQLite's words would be "attempt to write a readonly database"
      return makeError(empty ? ErrorCode::kNoData : ErrorCode::kIo,
                       "{} {}: its commits would be in {}, which is missing or empty. If the trace "
                       "was copied, copy its -wal with it (cp {}* ...) into a directory you can "
                       "write; else its process was killed, or its disk filled, before the trace's "
                       "first commit",
                       path, empty ? "holds no committed data" : "cannot be read here",
                       fs::path(wal).filename().string(), fs::path(path).filename().string());
    }
    return error;  // SQLite's own words (they name the file): not a -wal problem
  }
  if (!writable && !fs::exists(path + "-shm", ec)) {
    return makeError(ErrorCode::kIo,
                     "{} is an unfinished trace (its process was killed, or still runs) whose last "
                     "commits are in its -wal; SQLite must write an index (-shm) beside it to read "
                     "them, and {} is not writable for you. Copy the run somewhere you can write "
                     "(cp -r {} /tmp/) and read the copy",
                     path, dir.string(), dir.string());
  }
  return error;
}

}  // namespace

// SQLite opens a trace's side files (-journal, -wal, -shm) when they are there: one that is not a
// regular file (a FIFO would block the open for good, a directory fails it) is named instead.
static Status checkSideFiles(const std::string& path) {
  namespace fs = std::filesystem;
  for (const char* suffix : {"-journal", "-wal", "-shm"}) {
    std::error_code ec;
    const fs::file_type type = fs::status(path + suffix, ec).type();
    if (type == fs::file_type::not_found || type == fs::file_type::regular || ec) continue;
    return makeError(ErrorCode::kCorrupt,
                     "{}{} beside the trace is not a regular file (a FIFO, a device or a "
                     "directory), which SQLite would block on or fail to read; remove it or copy "
                     "the trace alone (cp {} /tmp/) and read the copy",
                     path, suffix, path);
  }
  return Status::ok();
}

Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path) {
  bool wal = false;
  DETRACE_RETURN_IF_ERROR(checkHeader(path, wal));
  DETRACE_RETURN_IF_ERROR(checkSideFiles(path));
  std::error_code no_wal;
  // (Empty: a reader before this one may have left an empty -wal where the copy had none.)
  const bool wal_was_there = wal && std::filesystem::file_size(path + "-wal", no_wal) > 0 && !no_wal;
  std::unique_ptr<TraceReader> r(new TraceReader());
  r->path_ = path;
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  r->db_.reset(raw);
  if (rc != SQLITE_OK) return sqliteStatus(raw, rc, fmt::format("opening {}", path));
  sqlite3_busy_timeout(raw, 2000);  // a live recording may hold a write lock briefly

  auto app_id = pragmaInt(raw, "application_id");
  // (SQLite's errors name the file themselves: sqliteStatus.)
  if (!app_id.isOk()) {
    std::error_code no_journal;
    const bool busy = app_id.status().message().find("locked") != std::string::npos;  // still being created
    if (!busy && !wal_was_there && std::filesystem::file_size(path + "-journal", no_journal) > 0 && !no_journal) {
      // A rollback journal left behind, no -wal: the writer was still creating the file (turning
      // WAL on) when its process was killed or its disk filled; SQLite would roll it back, which
      // a reader may not.
      return makeError(ErrorCode::kNoData,
                       "{} was cut short while its process created it (its -journal remains: killed, "
                       "or out of disk or file descriptors, before anything was recorded)",
                       path);
    }
    return wal ? unfinishedTraceProblem(path, app_id.status(), false, wal_was_there) : app_id.status();
  }
  if (*app_id == 0 && tableCount(raw) == 0) {
    Status nothing = makeError(ErrorCode::kNoData,
                               "{} holds no committed data: its process was killed, or its disk filled, "
                               "before the trace's first commit",
                               path);
    return wal ? unfinishedTraceProblem(path, nothing, true, wal_was_there) : nothing;
  }
  if (*app_id != kApplicationId) {
    return makeError(ErrorCode::kNotATrace,
                     "{} is an SQLite database but not a detrace trace (application_id 0x{:08x}); "
                     "pass a run directory made by `detrace record`",
                     path, static_cast<uint32_t>(*app_id));
  }
  DETRACE_ASSIGN_OR_RETURN(int64_t version, pragmaInt(raw, "user_version"));
  if (version > kSchemaVersion) {
    return makeError(ErrorCode::kVersionMismatch,
                     "{} was written by a newer detrace (trace schema v{}; this detrace reads v{}); "
                     "upgrade detrace to read it",
                     path, version, kSchemaVersion);
  }
  if (version < kSchemaVersion) {
    return makeError(ErrorCode::kVersionMismatch,
                     "{} was written by an older detrace (trace schema v{}; this detrace reads v{}); "
                     "re-record it with this version",
                     path, version, kSchemaVersion);
  }
  Status st = r->load();
  if (!st.isOk()) return st.withContext(path);
  // TraceWriter::close leaves WAL mode as its last step; a file still in it was not closed.
  DETRACE_ASSIGN_OR_RETURN(std::string journal, pragmaText(raw, "journal_mode"));
  r->finished_ = journal != "wal";
  r->cache_.resize(kCachedCount);
  return r;
}

Status TraceReader::load() {
  sqlite3* db = db_.get();
  DETRACE_RETURN_IF_ERROR(checkSchema(db));
  DETRACE_RETURN_IF_ERROR(forEachRow(db, "SELECT key, value FROM meta", [&](sqlite3_stmt* s) {
    meta_[colText(s, 0)] = colText(s, 1);
    return Status::ok();
  }));
  // The rank's numbers are 32-bit: a larger one (damage) would read as another number.
  DETRACE_RETURN_IF_ERROR(forEachRow(
      db,
      "SELECT rank FROM ranks WHERE rank NOT BETWEEN -2147483648 AND 2147483647 OR world_size "
      "NOT BETWEEN -2147483648 AND 2147483647 OR local_rank NOT BETWEEN -2147483648 AND "
      "2147483647 OR device NOT BETWEEN -2147483648 AND 2147483647 LIMIT 1",
      [&](sqlite3_stmt*) {
        return makeError(ErrorCode::kCorrupt,
                         "its ranks table holds a rank, world size or device beyond any GPU job's: "
                         "the file is damaged; re-record the run");
      }));
  DETRACE_RETURN_IF_ERROR(forEachRow(
      db, fmt::format("SELECT {} FROM ranks LIMIT 1", columnList("ranks")), [&](sqlite3_stmt* s) {
        rank_ = readRank(s);
        return Status::ok();
      }));
  strings_.assign(1, std::string());
  DETRACE_RETURN_IF_ERROR(
      forEachRow(db, "SELECT id, text FROM strings ORDER BY id", [&](sqlite3_stmt* s) {
        int64_t id = sqlite3_column_int64(s, 0);
        if (id != static_cast<int64_t>(strings_.size())) {
          return makeError(ErrorCode::kCorrupt,
                           "the strings table has a gap at id {}; the file is damaged", id);
        }
        strings_.push_back(colText(s, 1));
        return Status::ok();
      }));
  DETRACE_RETURN_IF_ERROR(checkStringsKept(db, static_cast<int64_t>(strings_.size()) - 1));
  DETRACE_RETURN_IF_ERROR(
      forEachRow(db, fmt::format("SELECT {} FROM streams ORDER BY id", columnList("streams")),
                 [&](sqlite3_stmt* s) {
                   streams_.push_back(readStream(s));
                   return Status::ok();
                 }));
  DETRACE_ASSIGN_OR_RETURN(collective_columns_, presentColumnList(db, "collectives"));
  collective_by_seq_sql_ = detailSql(collective_columns_, "collectives", true);
  DETRACE_ASSIGN_OR_RETURN(gemm_columns_, presentColumnList(db, "gemms"));
  gemm_by_seq_sql_ = detailSql(gemm_columns_, "gemms", true);
  // Tables added within schema version 1 (schema.cc) may be missing from older files.
  return forEachRow(
      db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('launch_params', 'graph_ops')",
      [&](sqlite3_stmt* s) {
        (colText(s, 0) == "launch_params" ? has_launch_params_ : has_graph_ops_) = true;
        return Status::ok();
      });
}

std::string TraceReader::metaValue(const std::string& key) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? std::string() : it->second;
}

std::string TraceReader::str(int64_t id) const {
  if (id == kUnset) return {};
  if (id <= 0 || id >= static_cast<int64_t>(strings_.size())) {
    return fmt::format("<bad string id {}>", id);
  }
  return strings_[static_cast<size_t>(id)];
}

Result<sqlite3_stmt*> TraceReader::cached(int which, const char* sql) {
  auto& slot = cache_[static_cast<size_t>(which)];
  if (!slot) {
    DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db_.get(), sql, true));
    slot.reset(s.release());
  }
  sqlite3_reset(slot.get());
  return slot.get();
}

Result<int64_t> TraceReader::eventCount() {
  // Events are numbered 0..N-1 (the writer hands the numbers out densely); both ends are read from
  // the key's index, so a damaged numbering is named here rather than trusted.
  int64_t lo = 0, hi = -1;
  DETRACE_RETURN_IF_ERROR(forEachRow(db_.get(), "SELECT coalesce(min(seq), 0), coalesce(max(seq), -1) FROM events",
                                     [&](sqlite3_stmt* s) {
                                       lo = sqlite3_column_int64(s, 0);
                                       hi = sqlite3_column_int64(s, 1);
                                       return Status::ok();
                                     }));
  if (lo != 0 || hi < -1 || hi == INT64_MAX) {
    return makeError(ErrorCode::kCorrupt,
                     "{}'s events are not numbered from 0 (they run from {} to {}): the file is "
                     "damaged; re-record the run",
                     path_, lo, hi);
  }
  // Past 2^31 numbers (more than any recording holds), count them: numbers with gaps are damage,
  // not a trace too large for the tools.
  if (hi >= (int64_t{1} << 31)) {
    int64_t rows = 0;
    DETRACE_RETURN_IF_ERROR(forEachRow(db_.get(), "SELECT count(*) FROM events", [&](sqlite3_stmt* s) {
      rows = sqlite3_column_int64(s, 0);
      return Status::ok();
    }));
    DETRACE_RETURN_IF_ERROR(numberingHasNoGap(path_, rows, hi));
  }
  return hi + 1;
}

Status TraceReader::checkDense(int64_t rows) {
  DETRACE_ASSIGN_OR_RETURN(int64_t count, eventCount());
  return numberingHasNoGap(path_, rows, count - 1);
}

Result<std::map<EventKind, int64_t>> TraceReader::countsByKind() {
  std::map<EventKind, int64_t> counts;
  DETRACE_RETURN_IF_ERROR(forEachRow(db_.get(), "SELECT kind, count(*) FROM events GROUP BY kind",
                                     [&](sqlite3_stmt* s) {
                                       counts[static_cast<EventKind>(sqlite3_column_int(s, 0))] =
                                           sqlite3_column_int64(s, 1);
                                       return Status::ok();
                                     }));
  return counts;
}

Result<TimeSpan> TraceReader::timeSpan() {
  TimeSpan span;
  DETRACE_RETURN_IF_ERROR(forEachRow(
      db_.get(),
      "SELECT min(min(coalesce(cpu_ns, gpu_start_ns), coalesce(gpu_start_ns, cpu_ns))), "
      "max(max(coalesce(gpu_end_ns, cpu_ns), coalesce(cpu_ns, gpu_end_ns))) FROM events",
      [&](sqlite3_stmt* s) {
        span.first_ns = colOpt(s, 0);
        span.last_ns = colOpt(s, 1);
        return Status::ok();
      }));
  return span;
}

Result<std::map<std::string, int64_t>> TraceReader::stats() {
  std::map<std::string, int64_t> out;
  DETRACE_RETURN_IF_ERROR(forEachRow(db_.get(), "SELECT key, value FROM stats", [&](sqlite3_stmt* s) {
    out[colText(s, 0)] = sqlite3_column_int64(s, 1);
    return Status::ok();
  }));
  return out;
}

Result<Event> TraceReader::event(int64_t seq) {
  static const std::string sql =
      fmt::format("SELECT {} FROM events WHERE seq = ?", columnList("events"));
  DETRACE_ASSIGN_OR_RETURN(sqlite3_stmt * s, cached(kEventBySeq, sql.c_str()));
  sqlite3_bind_int64(s, 1, seq);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return makeError(ErrorCode::kNotFound, "no event with seq {}", seq);
  if (rc != SQLITE_ROW) return sqliteStatus(db_.get(), rc, "reading an event");
  return readEvent(s);
}

Result<EventCursor> TraceReader::events(int64_t from, int64_t to, std::optional<EventKind> kind) {
  std::string sql = fmt::format("SELECT {} FROM events WHERE seq >= ? AND seq < ?{} ORDER BY seq",
                                columnList("events"), kind ? " AND kind = ?" : "");
  DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db_.get(), sql));
  sqlite3_bind_int64(s.get(), 1, from);
  sqlite3_bind_int64(s.get(), 2, to);
  if (kind) sqlite3_bind_int64(s.get(), 3, static_cast<int64_t>(*kind));
  return EventCursor(db_.get(), s.release());
}

namespace {
// The row of event `seq` that a cached `... WHERE seq = ?` statement selects, if there is one;
// read(stmt, 1) decodes it (the columns after seq).
template <typename T, typename ReadFn>
Result<std::optional<T>> readDetail(sqlite3* db, Result<sqlite3_stmt*> stmt, int64_t seq,
                                    ReadFn read, const char* what = "reading event details") {
  if (!stmt.isOk()) return stmt.status();
  sqlite3_stmt* s = *stmt;
  sqlite3_bind_int64(s, 1, seq);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return std::optional<T>();
  if (rc != SQLITE_ROW) return sqliteStatus(db, rc, what);
  return std::optional<T>(read(s, 1));
}

template <typename T, typename ReadFn>
Result<std::vector<std::pair<int64_t, T>>> readAllDetails(sqlite3* db, std::string_view cols,
                                                          std::string_view table, ReadFn read,
                                                          int64_t limit = INT64_MAX) {
  std::vector<std::pair<int64_t, T>> out;
  std::string sql = detailSql(cols, table, false);
  if (limit != INT64_MAX) sql += fmt::format(" LIMIT {}", limit);
  DETRACE_RETURN_IF_ERROR(forEachRow(db, sql, [&](sqlite3_stmt* s) {
    out.emplace_back(sqlite3_column_int64(s, 0), read(s, 1));
    return Status::ok();
  }));
  return out;
}

// Runs `sql`, whose two parameters are a seq range, and calls row(stmt) for each row.
template <typename F>
Status forEachRowIn(sqlite3* db, const std::string& sql, int64_t from, int64_t to, F&& row) {
  DETRACE_ASSIGN_OR_RETURN(StmtHandle s, prepare(db, sql));
  sqlite3_bind_int64(s.get(), 1, from);
  sqlite3_bind_int64(s.get(), 2, to);
  for (;;) {
    int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) return Status::ok();
    if (rc != SQLITE_ROW) return sqliteStatus(db, rc, fmt::format("reading \"{:.50}\"", sql));
    DETRACE_RETURN_IF_ERROR(row(s.get()));
  }
}

template <typename T, typename ReadFn>
Status forEachDetail(sqlite3* db, std::string_view cols, std::string_view table, int64_t from,
                     int64_t to, ReadFn read, const std::function<Status(int64_t, const T&)>& fn) {
  std::string sql = fmt::format("SELECT {} FROM {} WHERE seq >= ? AND seq < ? ORDER BY seq", cols, table);
  return forEachRowIn(db, sql, from, to, [&](sqlite3_stmt* s) {
    return fn(sqlite3_column_int64(s, 0), read(s, 1));
  });
}

Result<int64_t> countRows(sqlite3* db, std::string_view table) {
  int64_t n = 0;
  DETRACE_RETURN_IF_ERROR(forEachRow(db, fmt::format("SELECT count(*) FROM {}", table),
                                     [&](sqlite3_stmt* s) {
                                       n = sqlite3_column_int64(s, 0);
                                       return Status::ok();
                                     }));
  return n;
}
}  // namespace

Result<std::optional<Collective>> TraceReader::collective(int64_t seq) {
  return readDetail<Collective>(db_.get(), cached(kCollectiveBySeq, collective_by_seq_sql_.c_str()), seq,
                                readCollective);
}

Result<std::optional<Gemm>> TraceReader::gemm(int64_t seq) {
  return readDetail<Gemm>(db_.get(), cached(kGemmBySeq, gemm_by_seq_sql_.c_str()), seq, readGemm);
}

Result<std::optional<Marker>> TraceReader::marker(int64_t seq) {
  static const std::string sql = detailSql(columnList("markers"), "markers", true);
  return readDetail<Marker>(db_.get(), cached(kMarkerBySeq, sql.c_str()), seq, readMarker);
}

Result<std::vector<std::pair<int64_t, Collective>>> TraceReader::collectives() {
  return readAllDetails<Collective>(db_.get(), collective_columns_, "collectives", readCollective);
}

Result<std::vector<std::pair<int64_t, Gemm>>> TraceReader::gemms(int64_t limit) {
  return readAllDetails<Gemm>(db_.get(), gemm_columns_, "gemms", readGemm, limit);
}

Status TraceReader::forEachCollective(int64_t from, int64_t to,
                                      const std::function<Status(int64_t, const Collective&)>& fn) {
  return forEachDetail<Collective>(db_.get(), collective_columns_, "collectives", from, to,
                                   readCollective, fn);
}

Status TraceReader::forEachGemm(int64_t from, int64_t to,
                                const std::function<Status(int64_t, const Gemm&)>& fn) {
  return forEachDetail<Gemm>(db_.get(), gemm_columns_, "gemms", from, to, readGemm, fn);
}

Result<int64_t> TraceReader::gemmCount() { return countRows(db_.get(), "gemms"); }
Result<int64_t> TraceReader::collectiveCount() { return countRows(db_.get(), "collectives"); }

Result<std::vector<Operand>> TraceReader::operands(int64_t seq) {
  static const std::string sql = fmt::format(
      "SELECT {} FROM operands WHERE seq = ? ORDER BY slot, id", operandFieldList());
  DETRACE_ASSIGN_OR_RETURN(sqlite3_stmt * s, cached(kOperandsBySeq, sql.c_str()));
  sqlite3_bind_int64(s, 1, seq);
  std::vector<Operand> out;
  for (;;) {
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) return sqliteStatus(db_.get(), rc, "reading operands");
    auto o = readOperandFields(s);  // its damage is named with the file
    if (!o.isOk()) return o.status().withContext(path_);
    out.push_back(std::move(*o));
  }
  return out;
}

Result<std::vector<Operand>> TraceReader::allOperands() {
  std::vector<Operand> out;
  Status st = forEachRow(
      db_.get(), fmt::format("SELECT {} FROM operands ORDER BY seq, slot, id", operandFieldList()),
      [&](sqlite3_stmt* s) -> Status {
        auto o = readOperandFields(s);
        if (!o.isOk()) return o.status().withContext(path_);
        out.push_back(std::move(*o));
        return Status::ok();
      });
  if (!st.isOk()) return st;
  return out;
}

Status TraceReader::forEachOperandFingerprint(const std::function<Status(Operand&)>& fn) {
  return forEachOperandFingerprint(INT64_MIN, INT64_MAX, fn);
}

Status TraceReader::forEachOperandFingerprint(int64_t from, int64_t to,
                                              const std::function<Status(Operand&)>& fn) {
  Operand o;
  return forEachRowIn(
      db_.get(),
      "SELECT seq, slot, role, rows, digest, row_digests, bytes FROM operands WHERE seq >= ? AND "
      "seq < ? ORDER BY seq, slot, id",
      from, to, [&](sqlite3_stmt* s) -> Status {
        o.seq = sqlite3_column_int64(s, 0);
        o.slot = sqlite3_column_int(s, 1);
        o.role = static_cast<OperandRole>(sqlite3_column_int(s, 2));
        o.rows = sqlite3_column_int64(s, 3);
        o.has_digest = sqlite3_column_type(s, 4) != SQLITE_NULL;
        o.digest = static_cast<uint64_t>(sqlite3_column_int64(s, 4));
        auto rows = decodeRowDigests(sqlite3_column_blob(s, 5),
                                     static_cast<size_t>(sqlite3_column_bytes(s, 5)), o.rows,
                                     o.has_digest, o.seq, o.slot);
        if (!rows.isOk()) return rows.status().withContext(path_);
        o.row_digests = std::move(*rows);
        o.bytes = sqlite3_column_int64(s, 6);
        return fn(o);
      });
}

Result<std::vector<Operand>> TraceReader::allOperandFingerprints() {
  std::vector<Operand> out;
  DETRACE_RETURN_IF_ERROR(forEachOperandFingerprint([&](Operand& o) {
    out.push_back(std::move(o));
    return Status::ok();
  }));
  return out;
}

Status TraceReader::forEachEventSkeleton(const std::function<Status(const EventSkeleton&)>& fn) {
  return forEachEventSkeleton(INT64_MIN, INT64_MAX, fn);
}

Status TraceReader::forEachEventSkeleton(int64_t from, int64_t to,
                                         const std::function<Status(const EventSkeleton&)>& fn) {
  return forEachRowIn(
      db_.get(),
      "SELECT seq, kind, name, parent_seq FROM events WHERE seq >= ? AND seq < ? ORDER BY seq",
      from, to, [&](sqlite3_stmt* s) -> Status {
        return fn({sqlite3_column_int64(s, 0), static_cast<EventKind>(sqlite3_column_int(s, 1)),
                   colOpt(s, 2), colOpt(s, 3)});
      });
}

Result<std::vector<TraceReader::EventSkeleton>> TraceReader::eventSkeletons() {
  std::vector<EventSkeleton> out;
  DETRACE_ASSIGN_OR_RETURN(int64_t n, eventCount());
  out.reserve(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(n, int64_t{1} << 28))));
  DETRACE_RETURN_IF_ERROR(forEachEventSkeleton([&](const EventSkeleton& e) {
    out.push_back(e);
    return Status::ok();
  }));
  return out;
}

Result<std::optional<LaunchParams>> TraceReader::launchParams(int64_t seq) {
  if (!has_launch_params_) return std::optional<LaunchParams>();
  static const std::string sql =
      fmt::format("SELECT {} FROM launch_params WHERE seq = ?", columnList("launch_params"));
  return readDetail<LaunchParams>(  // readLaunchParams reads the whole row, seq included
      db_.get(), cached(kLaunchParamsBySeq, sql.c_str()), seq,
      [](sqlite3_stmt* s, int) { return readLaunchParams(s); }, "reading launch parameters");
}

Status TraceReader::forEachLaunchParams(const std::function<Status(const LaunchParams&)>& fn) {
  if (!has_launch_params_) return Status::ok();
  return forEachRow(
      db_.get(),
      fmt::format("SELECT {} FROM launch_params ORDER BY seq", columnList("launch_params")),
      [&](sqlite3_stmt* s) { return fn(readLaunchParams(s)); });
}

Result<std::optional<GraphOp>> TraceReader::graphOp(int64_t seq) {
  if (!has_graph_ops_) return std::optional<GraphOp>();
  static const std::string sql =
      fmt::format("SELECT {} FROM graph_ops WHERE seq = ?", columnList("graph_ops"));
  return readDetail<GraphOp>(  // readGraphOp reads the whole row, seq included
      db_.get(), cached(kGraphOpBySeq, sql.c_str()), seq,
      [](sqlite3_stmt* s, int) { return readGraphOp(s); }, "reading a graph op");
}

Status TraceReader::forEachGraphOp(const std::function<Status(const GraphOp&)>& fn) {
  if (!has_graph_ops_) return Status::ok();
  return forEachRow(db_.get(),
                    fmt::format("SELECT {} FROM graph_ops ORDER BY seq", columnList("graph_ops")),
                    [&](sqlite3_stmt* s) { return fn(readGraphOp(s)); });
}

Result<int64_t> TraceReader::graphOpsBefore(int64_t seq) {
  if (!has_graph_ops_) return int64_t{0};
  int64_t n = 0;
  DETRACE_RETURN_IF_ERROR(forEachRow(
      db_.get(), fmt::format("SELECT count(*) FROM graph_ops WHERE seq < {}", seq),
      [&](sqlite3_stmt* s) {
        n = sqlite3_column_int64(s, 0);
        return Status::ok();
      }));
  return n;
}

Result<std::vector<uint8_t>> TraceReader::captureBytes(int64_t operand_id) {
  DETRACE_ASSIGN_OR_RETURN(
      sqlite3_stmt * s,
      cached(kCaptureById, "SELECT capture, capture_bytes FROM operands WHERE id = ?"));
  sqlite3_bind_int64(s, 1, operand_id);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return makeError(ErrorCode::kNotFound, "no operand with id {}", operand_id);
  if (rc != SQLITE_ROW) return sqliteStatus(db_.get(), rc, "reading captured bytes");
  if (sqlite3_column_type(s, 0) == SQLITE_NULL) {
    return makeError(ErrorCode::kNotFound,
                     "operand {} was not captured; record with `--capture full` to keep its bytes",
                     operand_id);
  }
  int64_t expected = sqlite3_column_int64(s, 1);
  if (expected < 0 || expected > (int64_t{1} << 40)) {
    return makeError(ErrorCode::kCorrupt, "operand {} claims {} captured bytes; the file is damaged",
                     operand_id, expected);
  }
  return zstdDecompress(sqlite3_column_blob(s, 0), static_cast<size_t>(sqlite3_column_bytes(s, 0)),
                        static_cast<size_t>(expected));
}

}  // namespace detrace::db
