// TraceWriter: producers enqueue under a short lock; one background thread commits batches.
// See writer.h for the design and the guarantees.
#include "detrace/db/writer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "detrace/base/version.h"
#include "detrace/db/schema.h"
#include "file_size_signal.h"
#include "row_codec.h"
#include "sqlite_fd_guard.h"
#include "sqlite_util.h"
#include "write_failure.h"
#include "zstd_util.h"

namespace detrace::db {
namespace {

struct StringRow { int64_t id; std::string text; };
struct MetaRow { std::string key, value; };
struct CollectiveRow { int64_t seq; Collective c; };
struct GemmRow { int64_t seq; Gemm g; };
struct MarkerRow { int64_t seq; Marker m; };
using ColdRecord = std::variant<StringRow, MetaRow, RankInfo, StreamInfo, CollectiveRow, GemmRow,
                                MarkerRow, Operand, LaunchParams, GraphOp>;

// Everything taken from the queue for one transaction.
struct Batch {
  std::vector<Event> events;
  std::vector<ColdRecord> cold;
  std::map<std::string, int64_t> stats;  // absolute values
};

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Events are inserted kEventsPerInsert rows per statement: one statement step per row costs more
// than binding the row, so multi-row inserts roughly double the writer's throughput.
constexpr int kEventsPerInsert = 32;

enum Stmt { kBegin, kCommit, kRollback, kEvent, kEventMany, kCollective, kGemm, kMarker, kOperand, kString,
            kStream, kMeta, kRank, kStat, kLaunchParams, kGraphOp, kStmtCount };

// A second launch_params row for one seq replaces the first instead of failing the whole batch.
std::string upsertSql(const TableDef& table) {
  constexpr std::string_view kInsert = "INSERT";
  return "INSERT OR REPLACE" + insertSql(table).substr(kInsert.size());
}

constexpr int64_t kPageBytes = 16384;  // PRAGMA page_size below

// The name SQLite gives the database at `path`: absolute, with links resolved ("" if the
// directory cannot be resolved; SQLite's own name is used then).
std::string sqliteName(const std::string& path) {
  std::error_code ec;
  std::filesystem::path full = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? std::string() : full.string();
}

// The trace's descriptors, if the program closed one (sqlite_fd_guard.h): an error that says so.
// `db_path` is SQLite's name for the file; "" before it was opened.
Status descriptorsIntact(const std::string& db_path) {
  if (db_path.empty()) return Status::ok();
  std::vector<LostFd> lost;
  try {
    lost = lostTraceFds(db_path);
  } catch (...) {  // out of memory: asked again before the next batch
    return Status::ok();
  }
  if (lost.empty()) return Status::ok();
  return makeError(ErrorCode::kIo, "{}", describeLostFds(lost));
}

// A failed write, explained where the system can say why (write_failure.h). The failing write was
// at most a page and its WAL frame header past the end of the file or of its WAL.
Status explainWriteFailure(Status st, const std::string& path, const std::string& db_path) {
  if (Status fds = descriptorsIntact(db_path); !fds.isOk()) {
    return makeError(ErrorCode::kIo, "{}: {}", st.message(), fds.message());
  }
  if (st.code() != ErrorCode::kIo || st.message().find("disk is full") != std::string::npos) return st;
  const std::string cause = writeFailureCause({path, path + "-wal"}, 2 * (kPageBytes + 24));
  return cause.empty() ? st : makeError(ErrorCode::kIo, "{}: {}", st.message(), cause);
}

// Threads inside SQLite for a writer now (sqliteInUse()).
std::atomic<int> g_sqlite_users{0};

// Marks a stretch in which this thread may be inside SQLite.
class SqliteUse {
 public:
  SqliteUse() { g_sqlite_users.fetch_add(1, std::memory_order_seq_cst); }
  ~SqliteUse() { g_sqlite_users.fetch_sub(1, std::memory_order_seq_cst); }
  SqliteUse(const SqliteUse&) = delete;
  SqliteUse& operator=(const SqliteUse&) = delete;
};

}  // namespace

bool sqliteInUse() noexcept { return g_sqlite_users.load(std::memory_order_seq_cst) > 0; }

class TraceWriter::Impl {
 public:
  Impl(std::string path, WriterOptions options)
      : path_(std::move(path)),
        options_(options),
        batch_trigger_(std::max<size_t>(1, std::min(options.batch_events, options.queue_capacity))) {}
  ~Impl() { (void)close(); }

  Status open();        // checks the path, then createFile()
  Status createFile();  // the file, its settings, the schema and the prepared statements
  // The writer's thread; `open` first makes the file (open_in_background).
  void start(bool open) {
    thread_ = std::thread([this, open] {
      if (open) openInBackground();
      run();
    });
  }
  bool opened() const { return opened_.load(std::memory_order_acquire); }
  void setOpened() { opened_.store(true, std::memory_order_release); }

  std::optional<int64_t> appendEvent(const Event& e, std::optional<ColdRecord> detail);
  bool appendCold(ColdRecord record, size_t bytes);
  int64_t intern(std::string_view text);
  int64_t stream(int64_t handle, int32_t device, int32_t priority);
  void addStat(std::string_view key, int64_t delta);
  void setStat(std::string_view key, int64_t value);
  Status flush(std::optional<std::chrono::milliseconds> limit = std::nullopt);
  Status close();
  Status status() const { std::lock_guard lk(mu_); return error_; }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  WriterCounters counters() const { std::lock_guard lk(mu_); return counters_; }
  const std::string& path() const { return path_; }

 private:
  bool waitForSpaceLocked(std::unique_lock<std::mutex>& lk, bool cold, size_t bytes);
  void openInBackground();
  void run();
  Status writeBatch(Batch& batch);
  Status writeBatchNoThrow(Batch& batch) noexcept;
  Status checkedWriteBatch(Batch& batch) noexcept;
  Status writeEvents(const std::vector<Event>& events);
  Status writeStats(const std::map<std::string, int64_t>& stats);
  Status writeCold(ColdRecord& record);
  Status step(Stmt which, std::string_view what);
  std::map<std::string, int64_t> statsSnapshotLocked(const WriterCounters& c) const;

  const std::string path_;
  std::string db_path_;  // SQLite's name for it (absolute), which its descriptors are known by
  const WriterOptions options_;
  const size_t batch_trigger_;  // queued events that wake the writer before flush_interval
  DbHandle db_;
  StmtHandle stmts_[kStmtCount];

  mutable std::mutex mu_;
  std::condition_variable cv_work_;   // writer thread: work or flush or close
  std::condition_variable cv_space_;  // producers (kBlock): queue has room
  std::condition_variable cv_done_;   // flush(): a batch committed
  std::vector<Event> events_;
  std::vector<ColdRecord> cold_;
  size_t cold_bytes_ = 0;
  int64_t next_seq_ = 0;
  int64_t next_operand_id_ = 0;
  int64_t next_stream_id_ = 0;
  int64_t taken_gen_ = 0;      // batches taken off the queue
  int64_t committed_gen_ = 0;  // batches finished (committed or failed)
  bool flush_requested_ = false;
  bool closing_ = false;
  bool closed_ = false;
  Status error_;
  std::atomic<bool> failed_{false};  // !error_.isOk(), readable without mu_
  std::atomic<bool> opened_{false};  // the file exists, schema and all
  // The writer's first error: kept, and published to failed() for readers that take no lock.
  void failLocked(Status st) {
    error_ = std::move(st);
    failed_.store(true, std::memory_order_relaxed);
  }
  WriterCounters counters_;
  std::map<std::string, int64_t, std::less<>> user_stats_;
  bool stats_dirty_ = false;  // a stat changed since the last batch took its snapshot
  std::unordered_map<std::string, int64_t, TransparentHash, std::equal_to<>> strings_;
  std::map<std::pair<int64_t, int32_t>, int64_t> streams_;
  std::thread thread_;
};

Status TraceWriter::Impl::open() {
  std::error_code ec;
  if (std::filesystem::exists(path_, ec)) {
    if (!options_.overwrite) {
      return makeError(ErrorCode::kIo, "{} already exists; choose another output or overwrite it",
                       path_);
    }
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix, ec);
  }
  SqliteUse use;
  return explainWriteFailure(createFile(), path_, db_path_);
}

Status TraceWriter::Impl::createFile() {
  // The file's descriptors, kept from a program that closes them (sqlite_fd_guard.h): announced
  // under the name SQLite will give it (absolute, links resolved), and again under the name it
  // gave if that differs (then only the WAL and shared memory, opened later, are guarded).
  installSqliteFdGuard();
  db_path_ = sqliteName(path_);
  if (!db_path_.empty()) announceTraceFile(db_path_);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path_.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  db_.reset(raw);
  if (rc != SQLITE_OK) return sqliteStatus(raw, rc, fmt::format("creating {}", path_));
  if (const char* name = sqlite3_db_filename(raw, "main"); name != nullptr && db_path_ != name) {
    if (!db_path_.empty()) forgetTraceFile(db_path_);
    db_path_ = name;
    announceTraceFile(db_path_);
  }
  // Page size first (fixed once the file has content), then WAL. A committed transaction
  // survives the process being killed at any point: the kernel holds the written pages. With
  // synchronous=OFF the writer never waits for fsync (it cost ~15% of throughput); only a power
  // loss or kernel crash could lose the last commits, which a profiler may accept.
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), fmt::format("PRAGMA page_size={}", kPageBytes)));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "PRAGMA journal_mode=WAL"));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "PRAGMA synchronous=OFF"));
  if (options_.max_pages > 0) {
    DETRACE_RETURN_IF_ERROR(
        exec(db_.get(), fmt::format("PRAGMA max_page_count={}", options_.max_pages)));
  }
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "PRAGMA cache_size=-16384"));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "PRAGMA temp_store=MEMORY"));  // no unguarded temp files
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "PRAGMA wal_autocheckpoint=4096"));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "BEGIN"));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), fmt::format("PRAGMA application_id={}", kApplicationId)));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), fmt::format("PRAGMA user_version={}", kSchemaVersion)));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), schemaDdl()));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), fmt::format(
      "INSERT INTO meta VALUES ('schema_version', '{}'), ('tool_version', '{}')", kSchemaVersion,
      kToolVersion)));
  DETRACE_RETURN_IF_ERROR(exec(db_.get(), "COMMIT"));

  const std::string sql[kStmtCount] = {
      "BEGIN", "COMMIT", "ROLLBACK",
      insertSql(schemaTable("events")), insertSql(schemaTable("events"), kEventsPerInsert),
      insertSql(schemaTable("collectives")),
      insertSql(schemaTable("gemms")), insertSql(schemaTable("markers")),
      insertSql(schemaTable("operands")), insertSql(schemaTable("strings")),
      insertSql(schemaTable("streams")),
      "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", insertSql(schemaTable("ranks")),
      "INSERT OR REPLACE INTO stats (key, value) VALUES (?, ?)",
      upsertSql(schemaTable("launch_params")), upsertSql(schemaTable("graph_ops"))};
  for (int i = 0; i < kStmtCount; ++i) {
    DETRACE_ASSIGN_OR_RETURN(stmts_[i], prepare(db_.get(), sql[i], /*persistent=*/true));
  }
  try {
    std::lock_guard lk(mu_);  // producers may be queueing already (open_in_background)
    events_.reserve(options_.queue_capacity);
  } catch (const std::exception&) {  // bad_alloc or length_error: never past the writer's caller
    return makeError(ErrorCode::kIo, "cannot hold a queue of {} events in memory; ask for a smaller one",
                     options_.queue_capacity);
  }
  return Status::ok();
}

bool TraceWriter::Impl::waitForSpaceLocked(std::unique_lock<std::mutex>& lk, bool cold,
                                           size_t bytes) {
  auto full = [&] {
    return cold ? cold_bytes_ + bytes > options_.cold_bytes_capacity && !cold_.empty()
                : events_.size() >= options_.queue_capacity;
  };
  if (!full()) return true;
  if (options_.policy == OverflowPolicy::kDrop) return false;
  cv_work_.notify_one();
  cv_space_.wait(lk, [&] { return !full() || closing_ || !error_.isOk(); });
  return !full();
}

std::optional<int64_t> TraceWriter::Impl::appendEvent(const Event& e,
                                                      std::optional<ColdRecord> detail) {
  std::unique_lock lk(mu_);
  if (closing_ || !error_.isOk() || !waitForSpaceLocked(lk, false, 0)) {
    ++counters_.events_dropped;
    return std::nullopt;
  }
  int64_t seq = next_seq_++;
  Event& stored = events_.emplace_back(e);
  stored.seq = seq;
  if (detail) {
    std::visit([seq](auto& r) {
      if constexpr (requires { r.seq; }) r.seq = seq;
    }, *detail);
    cold_.push_back(std::move(*detail));
    cold_bytes_ += sizeof(ColdRecord);
  }
  if (events_.size() >= batch_trigger_) cv_work_.notify_one();
  return seq;
}

bool TraceWriter::Impl::appendCold(ColdRecord record, size_t bytes) {
  std::unique_lock lk(mu_);
  bool is_operand = std::holds_alternative<Operand>(record);
  const auto* params = std::get_if<LaunchParams>(&record);
  const auto* graph_op = std::get_if<GraphOp>(&record);
  if ((params && params->seq < 0) || (graph_op && graph_op->seq < 0) || closing_ || !error_.isOk() ||
      !waitForSpaceLocked(lk, true, bytes)) {
    if (is_operand) ++counters_.operands_dropped;
    if (params) ++counters_.launch_params_dropped;
    return false;
  }
  if (is_operand) std::get<Operand>(record).id = next_operand_id_++;
  cold_.push_back(std::move(record));
  cold_bytes_ += bytes;
  if (cold_bytes_ >= std::max<size_t>(1, options_.cold_bytes_capacity / 2)) cv_work_.notify_one();
  return true;
}

int64_t TraceWriter::Impl::intern(std::string_view text) {
  std::lock_guard lk(mu_);
  if (auto it = strings_.find(text); it != strings_.end()) return it->second;
  int64_t id = static_cast<int64_t>(strings_.size()) + 1;
  strings_.emplace(std::string(text), id);
  // Strings are never dropped: every id handed out must resolve.
  cold_.emplace_back(StringRow{id, std::string(text)});
  cold_bytes_ += text.size();
  return id;
}

int64_t TraceWriter::Impl::stream(int64_t handle, int32_t device, int32_t priority) {
  std::lock_guard lk(mu_);
  auto [it, inserted] = streams_.try_emplace({handle, device}, next_stream_id_);
  if (inserted) {
    ++next_stream_id_;
    cold_.emplace_back(StreamInfo{it->second, handle, device, priority, kUnset});
  }
  return it->second;
}

void TraceWriter::Impl::addStat(std::string_view key, int64_t delta) {
  std::lock_guard lk(mu_);
  auto it = user_stats_.find(key);
  if (it == user_stats_.end()) it = user_stats_.emplace(std::string(key), 0).first;
  it->second += delta;
  stats_dirty_ = stats_dirty_ || delta != 0;
}

void TraceWriter::Impl::setStat(std::string_view key, int64_t value) {
  std::lock_guard lk(mu_);
  auto it = user_stats_.find(key);
  if (it == user_stats_.end()) {
    user_stats_.emplace(std::string(key), value);
  } else if (it->second != value) {
    it->second = value;
  } else {
    return;
  }
  stats_dirty_ = true;
}

std::map<std::string, int64_t> TraceWriter::Impl::statsSnapshotLocked(
    const WriterCounters& c) const {
  std::map<std::string, int64_t> s(user_stats_.begin(), user_stats_.end());
  s["events_written"] = c.events_written;
  s["events_dropped"] = c.events_dropped;
  s["operands_written"] = c.operands_written;
  s["operands_dropped"] = c.operands_dropped;
  s["bytes_captured"] = c.bytes_captured;
  s["launch_params_written"] = c.launch_params_written;
  s["launch_params_dropped"] = c.launch_params_dropped;
  s["strings_written"] = c.strings_written;
  s["batches"] = c.batches;
  return s;
}

// On the writer's thread, before run(): makes the file. If that fails, the error is the writer's:
// run() then drops and counts every record, and answers flushes and close() as after any failure.
void TraceWriter::Impl::openInBackground() {
  blockFileSizeSignal();  // the schema's writes past `ulimit -f` fail; they never end the program
  if (options_.hold_before_open.count() > 0) std::this_thread::sleep_for(options_.hold_before_open);
  Status st = [&] {
    try {
      return open();
    } catch (...) {  // out of memory for a statement or a message
      return Status(ErrorCode::kIo, "out of memory while creating the trace");
    }
  }();
  if (st.isOk()) {
    setOpened();
    return;
  }
  std::lock_guard lk(mu_);
  failLocked(st.withContext(fmt::format("creating trace {}", path_)));
  cv_space_.notify_all();
}

void TraceWriter::Impl::run() {
  blockFileSizeSignal();  // a trace past `ulimit -f` fails its writes; it never ends the program
  std::unique_lock lk(mu_);
  for (;;) {
    cv_work_.wait_for(lk, options_.flush_interval, [&] {
      return closing_ || flush_requested_ || events_.size() >= batch_trigger_ ||
             cold_bytes_ >= std::max<size_t>(1, options_.cold_bytes_capacity / 2);
    });
    // Stats alone make a batch too (at the flush interval): a process killed later keeps them.
    bool has_work = !events_.empty() || !cold_.empty() || stats_dirty_;
    if (!has_work && !closing_) {
      flush_requested_ = false;
      continue;
    }
    Batch batch;
    batch.events.swap(events_);
    batch.cold.swap(cold_);
    try {
      events_.reserve(options_.queue_capacity / 4);
    } catch (...) {  // out of memory: the queue grows as it can
    }
    cold_bytes_ = 0;
    flush_requested_ = false;
    int64_t gen = ++taken_gen_;
    bool closing = closing_;
    cv_space_.notify_all();
    bool failed = !error_.isOk();
    int64_t n_events = static_cast<int64_t>(batch.events.size());
    int64_t n_operands = 0, captured = 0, n_params = 0, n_strings = 0;
    for (const ColdRecord& r : batch.cold) {
      if (const auto* o = std::get_if<Operand>(&r)) {
        ++n_operands;
        captured += o->capture_bytes;
      }
      n_params += std::holds_alternative<LaunchParams>(r);
      n_strings += std::holds_alternative<StringRow>(r);
    }
    // Counters as they will stand after this batch, written inside its transaction.
    WriterCounters after = counters_;
    after.events_written += n_events;
    after.operands_written += n_operands;
    after.bytes_captured += captured;
    after.launch_params_written += n_params;
    after.strings_written += n_strings;
    after.batches += 1;
    try {
      batch.stats = statsSnapshotLocked(after);
      stats_dirty_ = false;
    } catch (...) {  // out of memory: this batch leaves the stats as they were
    }
    lk.unlock();

    Status st = Status::ok();
    if (!failed) {
      SqliteUse use;
      st = checkedWriteBatch(batch);
    }

    lk.lock();
    if (failed || !st.isOk()) {
      if (error_.isOk()) failLocked(std::move(st));
      counters_.events_dropped += n_events;
      counters_.operands_dropped += n_operands;
      counters_.launch_params_dropped += n_params;
    } else {
      // Add this batch's numbers; producers may have counted drops while it was written.
      counters_.events_written += n_events;
      counters_.operands_written += n_operands;
      counters_.bytes_captured += captured;
      counters_.launch_params_written += n_params;
      counters_.strings_written += n_strings;
      counters_.batches += 1;
    }
    committed_gen_ = gen;
    cv_done_.notify_all();
    cv_space_.notify_all();
    if (closing && events_.empty() && cold_.empty()) return;
  }
}

// A batch written, or why not. A descriptor the program closed fails the batch before SQLite
// writes through its number.
Status TraceWriter::Impl::checkedWriteBatch(Batch& batch) noexcept {
  try {
    if (Status fds = descriptorsIntact(db_path_); !fds.isOk()) return fds;
  } catch (...) {  // out of memory for the message: an error all the same
    return Status(ErrorCode::kIo, std::string());
  }
  Status st = writeBatchNoThrow(batch);
  if (st.isOk()) return st;
  try {
    return explainWriteFailure(std::move(st), path_, db_path_);
  } catch (...) {
    return Status(ErrorCode::kIo, "a write failed (out of memory to say why)");
  }
}

// writeBatch, with an exception (out of memory, in a compression buffer or a row) turned into an
// error: the writer's thread runs inside the traced program, where an exception escaping it would
// end the program. The batch's open transaction is rolled back and the batch tried again a little
// later (memory may have come back; writing a batch changes nothing in it), kOutOfMemoryTries
// times in all. Only then is it an error, which ends the writing: the next batch's events are
// numbered on from this one's. What earlier batches committed stays in the file.
Status TraceWriter::Impl::writeBatchNoThrow(Batch& batch) noexcept {
  constexpr int kOutOfMemoryTries = 3;
  for (int attempt = 1;; ++attempt) {
    try {
      return writeBatch(batch);
    } catch (...) {
    }
    (void)sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    if (attempt == kOutOfMemoryTries) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  try {
    return Status(ErrorCode::kIo, "out of memory while writing a batch");
  } catch (...) {
    return Status(ErrorCode::kIo, std::string());
  }
}

Status TraceWriter::Impl::step(Stmt which, std::string_view what) {
  sqlite3_stmt* s = stmts_[which].get();
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) return sqliteStatus(db_.get(), rc, what);
  return Status::ok();
}

Status TraceWriter::Impl::writeCold(ColdRecord& record) {
  return std::visit(
      [&](auto& r) -> Status {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, StringRow>) {
          bindInt(stmts_[kString].get(), 1, r.id);
          bindText(stmts_[kString].get(), 2, r.text);
          return step(kString, "inserting a string");
        } else if constexpr (std::is_same_v<T, MetaRow>) {
          bindText(stmts_[kMeta].get(), 1, r.key);
          bindText(stmts_[kMeta].get(), 2, r.value);
          return step(kMeta, "writing metadata");
        } else if constexpr (std::is_same_v<T, RankInfo>) {
          DETRACE_RETURN_IF_ERROR(exec(db_.get(), "DELETE FROM ranks"));
          bindRank(stmts_[kRank].get(), r);
          return step(kRank, "writing the rank");
        } else if constexpr (std::is_same_v<T, StreamInfo>) {
          bindStream(stmts_[kStream].get(), r);
          return step(kStream, "inserting a stream");
        } else if constexpr (std::is_same_v<T, CollectiveRow>) {
          bindCollective(stmts_[kCollective].get(), r.seq, r.c);
          return step(kCollective, "inserting a collective");
        } else if constexpr (std::is_same_v<T, GemmRow>) {
          bindGemm(stmts_[kGemm].get(), r.seq, r.g);
          return step(kGemm, "inserting a GEMM");
        } else if constexpr (std::is_same_v<T, MarkerRow>) {
          bindMarker(stmts_[kMarker].get(), r.seq, r.m);
          return step(kMarker, "inserting a marker");
        } else if constexpr (std::is_same_v<T, GraphOp>) {
          bindGraphOp(stmts_[kGraphOp].get(), r);
          return step(kGraphOp, "inserting a graph op");
        } else if constexpr (std::is_same_v<T, LaunchParams>) {
          sqlite3_stmt* s = stmts_[kLaunchParams].get();
          bindLaunchParams(s, r);
          Status status = step(kLaunchParams, "inserting launch parameters");
          sqlite3_clear_bindings(s);  // drop the blob copy now
          return status;
        } else {
          sqlite3_stmt* s = stmts_[kOperand].get();
          bindOperandFields(s, r);
          std::vector<uint8_t> packed;
          if (!r.capture.empty()) {
            DETRACE_ASSIGN_OR_RETURN(packed, zstdCompress(r.capture, options_.zstd_level));
          }
          bindBlob(s, kOperandCaptureColumn, packed.data(), packed.size());
          Status status = step(kOperand, "inserting an operand");
          sqlite3_clear_bindings(s);  // drop the blob copy now
          return status;
        }
      },
      record);
}

// Events arrive in seq order with no gaps, so SQLite can assign seq itself (rowid = max + 1): the
// writer binds seq as NULL, which saves a b-tree seek per row, and checks the last rowid per batch.
Status TraceWriter::Impl::writeEvents(const std::vector<Event>& events) {
  if (events.empty()) return Status::ok();
  size_t i = 0;
  auto bindRow = [](sqlite3_stmt* s, const Event& e, int base) {
    bindEvent(s, e, base);
    if (e.seq != 0) sqlite3_bind_null(s, base + 1);  // seq 0 must be explicit: rowids start at 1
  };
  sqlite3_stmt* many = stmts_[kEventMany].get();
  for (; i + kEventsPerInsert <= events.size(); i += kEventsPerInsert) {
    for (int r = 0; r < kEventsPerInsert; ++r) {
      bindRow(many, events[i + static_cast<size_t>(r)], r * kEventColumns);
    }
    DETRACE_RETURN_IF_ERROR(step(kEventMany, "inserting events"));
  }
  for (; i < events.size(); ++i) {
    bindRow(stmts_[kEvent].get(), events[i], 0);
    DETRACE_RETURN_IF_ERROR(step(kEvent, "inserting events"));
  }
  int64_t last = sqlite3_last_insert_rowid(db_.get());
  if (last != events.back().seq) {
    return makeError(ErrorCode::kInternal, "event rows out of sequence (last rowid {}, seq {})", last,
                     events.back().seq);
  }
  return Status::ok();
}

Status TraceWriter::Impl::writeStats(const std::map<std::string, int64_t>& stats) {
  for (const auto& [key, value] : stats) {
    bindText(stmts_[kStat].get(), 1, key);
    bindInt(stmts_[kStat].get(), 2, value);
    DETRACE_RETURN_IF_ERROR(step(kStat, "writing stats"));
  }
  return Status::ok();
}

Status TraceWriter::Impl::writeBatch(Batch& batch) {
  DETRACE_RETURN_IF_ERROR(step(kBegin, "BEGIN"));
  if (options_.hold_in_batch.count() > 0) std::this_thread::sleep_for(options_.hold_in_batch);
  auto body = [&]() -> Status {
    for (ColdRecord& r : batch.cold) {
      if (!std::holds_alternative<Operand>(r)) DETRACE_RETURN_IF_ERROR(writeCold(r));
    }
    DETRACE_RETURN_IF_ERROR(writeEvents(batch.events));
    for (ColdRecord& r : batch.cold) {
      if (std::holds_alternative<Operand>(r)) DETRACE_RETURN_IF_ERROR(writeCold(r));
    }
    DETRACE_RETURN_IF_ERROR(writeStats(batch.stats));
    return step(kCommit, "COMMIT");
  };
  Status st = body();
  if (!st.isOk()) (void)step(kRollback, "ROLLBACK");
  return st;
}

Status TraceWriter::Impl::flush(std::optional<std::chrono::milliseconds> limit) {
  std::unique_lock lk(mu_);
  if (closed_) return error_;
  // Stats changed while closing go out with close()'s last batch: no commit of their own to wait for.
  bool queued = !events_.empty() || !cold_.empty() || (stats_dirty_ && !closing_);
  int64_t target = taken_gen_ + (queued ? 1 : 0);
  flush_requested_ = true;
  cv_work_.notify_one();
  auto committed = [&] { return committed_gen_ >= target; };
  if (!limit) {
    cv_done_.wait(lk, committed);
  } else if (!cv_done_.wait_for(lk, *limit, committed)) {
    return makeError(ErrorCode::kUnavailable,
                     "the trace writer did not commit within {} ms (it goes on in the background)",
                     limit->count());
  }
  return error_;
}

Status TraceWriter::Impl::close() {
  {
    std::lock_guard lk(mu_);
    if (closed_) return error_;
    closing_ = true;
  }
  cv_work_.notify_one();
  cv_space_.notify_all();
  if (thread_.joinable()) thread_.join();
  FileSizeSignalShield shield;  // the final commit and checkpoint write on the caller's thread
  SqliteUse use;
  std::lock_guard lk(mu_);
  closed_ = true;
  // A number the program took stops the final writes here, with the reason (every call SQLite
  // would make through it, its close's included, is refused anyway: sqlite_fd_guard.h).
  if (db_ && error_.isOk()) {
    if (Status fds = descriptorsIntact(db_path_); !fds.isOk()) failLocked(std::move(fds));
  }
  if (db_ && error_.isOk()) {
    // Drops counted after the last batch was taken are not in the file yet.
    Status st = step(kBegin, "BEGIN");
    if (st.isOk()) st = writeStats(statsSnapshotLocked(counters_));
    if (st.isOk()) st = step(kCommit, "COMMIT");
    if (!st.isOk()) failLocked(explainWriteFailure(st, path_, db_path_));
  }
  for (auto& s : stmts_) s.reset();
  if (db_ && error_.isOk()) {
    // Fold the WAL into the main file and leave WAL mode, so a finished trace is one
    // self-contained file and readers (read-only) never create -wal/-shm files beside it.
    Status st = exec(db_.get(), "PRAGMA wal_checkpoint(TRUNCATE)");
    if (st.isOk()) st = exec(db_.get(), "PRAGMA journal_mode=DELETE");
    if (!st.isOk()) failLocked(explainWriteFailure(st, path_, db_path_));
  }
  db_.reset();
  if (!db_path_.empty()) forgetTraceFile(db_path_);
  return error_;
}

// ---- public face -------------------------------------------------------------------------------

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceWriter::~TraceWriter() = default;

Result<std::unique_ptr<TraceWriter>> TraceWriter::create(const std::string& path,
                                                         const WriterOptions& options) {
  auto impl = std::make_unique<Impl>(path, options);
  if (!options.open_in_background) {
    Status st = [&] {
      FileSizeSignalShield shield;  // the schema is written on the caller's thread
      return impl->open();
    }();
    if (!st.isOk()) return st.withContext(fmt::format("creating trace {}", path));
    impl->setOpened();
  }
  try {
    impl->start(options.open_in_background);
  } catch (const std::system_error& e) {  // no thread to be had
    return makeError(ErrorCode::kIo, "creating trace {}: cannot start the writer's thread: {}", path, e.what());
  }
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(impl)));
}

void TraceWriter::setMeta(std::string key, std::string value) {
  impl_->appendCold(MetaRow{std::move(key), std::move(value)}, 64);
}
void TraceWriter::setRank(const RankInfo& rank) { impl_->appendCold(rank, sizeof(RankInfo)); }
int64_t TraceWriter::intern(std::string_view text) { return impl_->intern(text); }
int64_t TraceWriter::stream(int64_t handle, int32_t device, int32_t priority) {
  return impl_->stream(handle, device, priority);
}
std::optional<int64_t> TraceWriter::append(const Event& event) {
  return impl_->appendEvent(event, std::nullopt);
}
std::optional<int64_t> TraceWriter::appendCollective(const Event& event, const Collective& c) {
  return impl_->appendEvent(event, ColdRecord{CollectiveRow{kUnset, c}});
}
std::optional<int64_t> TraceWriter::appendGemm(const Event& event, const Gemm& g) {
  return impl_->appendEvent(event, ColdRecord{GemmRow{kUnset, g}});
}
std::optional<int64_t> TraceWriter::appendMarker(const Event& event, const Marker& m) {
  return impl_->appendEvent(event, ColdRecord{MarkerRow{kUnset, m}});
}
bool TraceWriter::appendOperand(Operand operand) {
  size_t bytes = sizeof(Operand) + operand.capture.size() + operand.row_digests.size() * 8;
  return impl_->appendCold(std::move(operand), bytes);
}
bool TraceWriter::appendLaunchParams(LaunchParams params) {
  size_t bytes = sizeof(LaunchParams) + params.layout.size() + params.bytes.size();
  return impl_->appendCold(std::move(params), bytes);
}
bool TraceWriter::appendGraphOp(const GraphOp& op) { return impl_->appendCold(op, sizeof(GraphOp)); }
void TraceWriter::addStat(std::string_view key, int64_t delta) { impl_->addStat(key, delta); }
void TraceWriter::setStat(std::string_view key, int64_t value) { impl_->setStat(key, value); }
Status TraceWriter::flush() { return impl_->flush(); }
Status TraceWriter::flush(std::chrono::milliseconds limit) { return impl_->flush(limit); }
Status TraceWriter::close() { return impl_->close(); }
Status TraceWriter::status() const { return impl_->status(); }
bool TraceWriter::failed() const { return impl_->failed(); }
bool TraceWriter::opened() const { return impl_->opened(); }
WriterCounters TraceWriter::counters() const { return impl_->counters(); }
const std::string& TraceWriter::path() const { return impl_->path(); }

}  // namespace detrace::db
