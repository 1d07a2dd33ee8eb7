// Opening things that are not good traces gives one clear sentence and never crashes.
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::Rng;
using testing::TempDir;

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string makeTrace(const TempDir& dir, const std::string& name, int64_t n, Rng& rng) {
  std::string path = dir.file(name);
  WriterOptions o;
  o.policy = OverflowPolicy::kBlock;
  auto w = TraceWriter::create(path, o);
  EXPECT_TRUE(w.isOk());
  int64_t id = (*w)->intern("k");
  for (int64_t i = 0; i < n; ++i) (void)(*w)->append(testing::randomKernel(rng, id, -1));
  EXPECT_TRUE((*w)->close().isOk());
  return path;
}

// Reads everything a reader can read; returns the first error, if any.
Status readAll(TraceReader& r) {
  DETRACE_RETURN_IF_ERROR(r.eventCount().status());
  DETRACE_RETURN_IF_ERROR(r.countsByKind().status());
  DETRACE_RETURN_IF_ERROR(r.timeSpan().status());
  DETRACE_ASSIGN_OR_RETURN(auto cursor, r.events());
  for (;;) {
    DETRACE_ASSIGN_OR_RETURN(bool more, cursor.next());
    if (!more) break;
  }
  DETRACE_RETURN_IF_ERROR(r.collectives().status());
  return r.gemms().status();
}

TEST(BadInput, MissingFile) {
  TempDir dir;
  auto r = TraceReader::open(dir.file("nope.dtrace"));
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("does not exist"), std::string::npos);
}

TEST(BadInput, EmptyFileTextFileAndRandomBytes) {
  TempDir dir;
  Rng rng;
  writeFile(dir.file("empty.dtrace"), "");
  writeFile(dir.file("text.dtrace"), "hello, this is a text file\n");
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng.range(0, 255));
  writeFile(dir.file("noise.dtrace"), noise);
  for (const char* name : {"empty.dtrace", "text.dtrace", "noise.dtrace"}) {
    auto r = TraceReader::open(dir.file(name));
    // An empty file is one a recording never wrote into (a run leaves it out); the others are not
    // traces at all.
    const ErrorCode want = std::string(name) == "empty.dtrace" ? ErrorCode::kNoData : ErrorCode::kNotATrace;
    EXPECT_EQ(r.status().code(), want) << name << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("not"), std::string::npos) << r.status().message();
  }
}

TEST(BadInput, ForeignSqliteDatabase) {
  TempDir dir;
  std::string path = dir.file("foreign.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE events (x); INSERT INTO events VALUES (1);", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto r = TraceReader::open(path);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotATrace);
  EXPECT_NE(r.status().message().find("SQLite database but not a detrace trace"), std::string::npos)
      << r.status().message();
}

TEST(BadInput, FutureAndPastSchemaVersions) {
  TempDir dir;
  Rng rng;
  for (int version : {2, 0}) {
    std::string path = makeTrace(dir, fmt::format("v{}.dtrace", version), 10, rng);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, fmt::format("PRAGMA user_version={}", version).c_str(), nullptr,
                           nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
    auto r = TraceReader::open(path);
    EXPECT_EQ(r.status().code(), ErrorCode::kVersionMismatch);
    EXPECT_NE(r.status().message().find(version == 2 ? "newer detrace" : "older detrace"),
              std::string::npos)
        << r.status().message();
  }
}

TEST(BadInput, TruncatedTraceGivesErrorsNotCrashes) {
  TempDir dir;
  Rng rng;
  std::string path = makeTrace(dir, "full.dtrace", 20000, rng);
  auto size = std::filesystem::file_size(path);
  int corrupt_or_ok = 0;
  for (double fraction : {0.9, 0.5, 0.2, 0.01}) {
    std::string cut = dir.file(fmt::format("cut{}.dtrace", fraction));
    std::filesystem::copy_file(path, cut);
    std::filesystem::resize_file(cut, static_cast<uintmax_t>(static_cast<double>(size) * fraction));
    auto r = TraceReader::open(cut);
    Status st = r.isOk() ? readAll(**r) : r.status();
    // A truncated file must say it is damaged (or not a trace, when the header is gone), and which.
    EXPECT_FALSE(st.isOk()) << "truncated to " << fraction << " read without error";
    if (!st.isOk()) {
      EXPECT_TRUE(st.code() == ErrorCode::kCorrupt || st.code() == ErrorCode::kNotATrace)
          << st.message();
      // Which file, also for a query that failed after the open (diff reads two runs).
      EXPECT_NE(st.message().find(cut), std::string::npos) << st.message();
      ++corrupt_or_ok;
    }
  }
  EXPECT_EQ(corrupt_or_ok, 4);
}

// A damaged page that the open does not read (the events table's root) fails a later query, whose
// error names the file: diff and bisect read several.
TEST(BadInput, AQueryThatFindsDamageNamesTheFile) {
  TempDir dir;
  Rng rng;
  const std::string path = makeTrace(dir, "proc-1.dtrace", 2000, rng);
  int64_t root = 0, page_size = 0;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'events'", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    root = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    page_size = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  ASSERT_GT(root, 1);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((root - 1) * page_size);
    f.put(static_cast<char>(0x7f));  // no b-tree page has this type
  }
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << "the open read the events table after all: " << r.status().message();
  const Status st = readAll(**r);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << st.message();
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
}

TEST(BadInput, FlippedBytesInsideTheFileNeverCrash) {
  TempDir dir;
  Rng rng;
  std::string path = makeTrace(dir, "full.dtrace", 5000, rng);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (int trial = 0; trial < 30; ++trial) {
    std::string damaged = bytes;
    for (int k = 0; k < 50; ++k) {
      damaged[static_cast<size_t>(rng.range(100, static_cast<int64_t>(damaged.size()) - 1))] =
          static_cast<char>(rng.range(0, 255));
    }
    std::string p = dir.file(fmt::format("d{}.dtrace", trial));
    writeFile(p, damaged);
    auto r = TraceReader::open(p);
    if (r.isOk()) (void)readAll(**r);  // any Status is fine; crashing is not
  }
}

TEST(BadInput, WriterRefusesToOverwriteUnlessAsked) {
  TempDir dir;
  Rng rng;
  std::string path = makeTrace(dir, "t.dtrace", 5, rng);
  auto again = TraceWriter::create(path);
  EXPECT_EQ(again.status().code(), ErrorCode::kIo);
  EXPECT_NE(again.status().message().find("already exists"), std::string::npos);
  WriterOptions o;
  o.overwrite = true;
  EXPECT_TRUE(TraceWriter::create(path, o).isOk());
}

TEST(BadInput, FullDiskStopsWritingKeepsCommittedDataAndNeverThrows) {
  TempDir dir;
  Rng rng;
  std::string path = dir.file("full.dtrace");
  WriterOptions o;
  o.policy = OverflowPolicy::kBlock;
  o.max_pages = 40;  // ~640 KiB: the "disk" fills after a few batches
  auto w = TraceWriter::create(path, o);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  int64_t id = (*w)->intern("k");
  EXPECT_FALSE((*w)->failed());
  int64_t committed = 0;
  Status st;
  for (int batch = 0; batch < 200 && st.isOk(); ++batch) {
    for (int i = 0; i < 500; ++i) (void)(*w)->append(testing::randomKernel(rng, id, -1));
    st = (*w)->flush();
    if (st.isOk()) committed = (batch + 1) * 500;
  }
  ASSERT_FALSE(st.isOk()) << "the quota never filled";
  EXPECT_TRUE((*w)->failed());
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("disk is full"), std::string::npos) << st.message();
  EXPECT_FALSE((*w)->append(testing::randomKernel(rng, id, -1)).has_value());
  EXPECT_GT((*w)->counters().events_dropped, 0);
  (void)(*w)->close();
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(*(*r)->eventCount(), committed);
}

TEST(BadInput, DropPolicyCountsDropsAndKeepsSequenceDense) {
  TempDir dir;
  Rng rng;
  WriterOptions o;
  o.policy = OverflowPolicy::kDrop;
  o.queue_capacity = 64;
  o.flush_interval = std::chrono::milliseconds(50);
  std::string path = dir.file("drop.dtrace");
  auto w = TraceWriter::create(path, o);
  ASSERT_TRUE(w.isOk());
  int64_t id = (*w)->intern("k");
  int64_t accepted = 0, dropped = 0;
  for (int i = 0; i < 200000; ++i) {
    auto seq = (*w)->append(testing::randomKernel(rng, id, -1));
    if (seq) {
      EXPECT_EQ(*seq, accepted);
      ++accepted;
    } else {
      ++dropped;
    }
  }
  ASSERT_TRUE((*w)->close().isOk());
  EXPECT_GT(dropped, 0) << "a 64-event queue never overflowed";
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*(*r)->eventCount(), accepted);
  EXPECT_EQ((*r)->stats()->at("events_dropped"), dropped);
}

// Manifests that are not files, or whose fields have the wrong type, are errors naming the problem
// (they used to end the process: an uncaught exception, or a read that blocked on a pipe); a run
// whose traces are intact opens with a warning instead.
TEST(BadInput, ManifestsOfTheWrongKindOrWithWrongTypesGiveErrors) {
  Rng rng;
  auto runWith = [&](const TempDir& dir) { (void)makeTrace(dir, "proc-1.dtrace", 10, rng); };
  {
    TempDir dir;
    runWith(dir);
    std::filesystem::create_directory(dir.file("manifest.json"));
    auto r = Run::open(dir.path().string());
    ASSERT_TRUE(r.isOk()) << r.status().message();
    ASSERT_EQ(r->warnings().size(), 1u);
    EXPECT_NE(r->warnings()[0].find("not a regular file"), std::string::npos) << r->warnings()[0];
  }
  {
    TempDir dir;
    runWith(dir);
    // A loop cannot be read, like a manifest without permission: the traces still are, with a
    // warning that what only the manifest says is unknown.
    std::filesystem::create_symlink("manifest.json", dir.file("manifest.json"));
    auto r = Run::open(dir.path().string());
    ASSERT_TRUE(r.isOk()) << r.status().message();
    ASSERT_EQ(r->warnings().size(), 1u);
    EXPECT_NE(r->warnings()[0].find("cannot read"), std::string::npos) << r->warnings()[0];
  }
  {
    TempDir dir;
    runWith(dir);
    ASSERT_EQ(mkfifo(dir.file("manifest.json").c_str(), 0600), 0);
    auto r = Run::open(dir.path().string());  // must not block on the pipe
    ASSERT_TRUE(r.isOk()) << r.status().message();
    ASSERT_EQ(r->warnings().size(), 1u);
    EXPECT_NE(r->warnings()[0].find("not a regular file"), std::string::npos) << r->warnings()[0];
  }
  {
    // A damaged manifest (half written by hand, another program's JSON) leaves the traces readable.
    for (const char* damaged : {R"({"broken)", R"({"format": "detrace-run", "version": 1, "exit_code": "x"})",
                                R"({"format": "detrace-run", "version": null})", R"({"format": "detrace-run"})",
                                R"({"format": "detrace-run", "version": "x"})"}) {
      SCOPED_TRACE(damaged);
      TempDir dir;
      runWith(dir);
      writeFile(dir.file("manifest.json"), damaged);
      auto r = Run::open(dir.path().string());
      ASSERT_TRUE(r.isOk()) << r.status().message();
      EXPECT_FALSE(r->hasManifest());
      EXPECT_FALSE(r->ranks().empty());
      ASSERT_EQ(r->warnings().size(), 1u);
      EXPECT_NE(r->warnings()[0].find("manifest.json"), std::string::npos) << r->warnings()[0];
      EXPECT_NE(r->warnings()[0].find("are unknown"), std::string::npos) << r->warnings()[0];
    }
  }
  const std::pair<const char*, const char*> bad_fields[] = {
      {R"({"format": 5, "version": 1})", "not a detrace run manifest"},
      {R"({"format": "detrace-run", "version": "1"})", "\"version\""},
      {R"({"format": "detrace-run", "version": [1]})", "\"version\""},
      {R"({"format": "detrace-run", "version": 1, "start_time_ns": 1.5e300})", "\"start_time_ns\""},
      {R"({"format": "detrace-run", "version": 1, "exit_code": 1e30})", "\"exit_code\""},
      {R"({"format": "detrace-run", "version": 1, "exit_code": 99999999999})", "\"exit_code\""},
      {R"({"format": "detrace-run", "version": 1, "command": "python"})", "\"command\""},
      {R"({"format": "detrace-run", "version": 1, "env": [1, 2]})", "\"env\""},
  };
  for (const auto& [json, expected] : bad_fields) {
    SCOPED_TRACE(json);
    TempDir dir;
    writeFile(dir.file("manifest.json"), json);
    auto m = readManifest(dir.path().string());
    ASSERT_FALSE(m.isOk());
    EXPECT_NE(m.status().message().find(expected), std::string::npos) << m.status().message();
  }
}

// A trace path that is a pipe is refused at once (reading it would block forever).
TEST(BadInput, APipeNamedLikeATraceIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("x.dtrace").c_str(), 0600), 0);
  auto r = TraceReader::open(dir.file("x.dtrace"));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos) << r.status().message();
}

// An operand's row digests cut short, emptied or padded (damage, or an edit) are named as damage
// when read, with the file: read short, the rows compared as absent and a batch diff called the op
// identical.
TEST(BadInput, DamagedRowDigestsAreNamedWhenRead) {
  Rng rng;
  const int64_t rows = rng.range(2, 64);
  const std::string damage[] = {
      fmt::format("substr(row_digests, 1, {})", rng.range(1, rows * 8 - 1)),  // cut short
      "NULL",                                                                 // emptied
      "row_digests || x'0102030405060708'"};                                  // one too many
  for (const std::string& how : damage) {
    SCOPED_TRACE(how);
    TempDir dir;
    const std::string path = dir.file("proc-1.dtrace");
    {
      WriterOptions o;
      o.policy = OverflowPolicy::kBlock;
      auto w = TraceWriter::create(path, o);
      ASSERT_TRUE(w.isOk());
      Event e;
      e.kind = EventKind::kGemm;
      e.name = (*w)->intern("cublasLtMatmul");
      Gemm g;
      g.api = e.name;
      auto seq = (*w)->appendGemm(e, g);
      ASSERT_TRUE(seq.has_value());
      Operand op;
      op.seq = *seq;
      op.slot = 3;
      op.name = (*w)->intern("D");
      op.role = OperandRole::kOutput;
      op.rows = rows;
      op.row_bytes = 16;
      op.row_stride = 16;
      op.bytes = rows * 16;
      op.has_digest = true;
      op.digest = rng.u64();
      for (int64_t r = 0; r < rows; ++r) op.row_digests.push_back(rng.u64());
      ASSERT_TRUE((*w)->appendOperand(std::move(op)));
      ASSERT_TRUE((*w)->close().isOk());
    }
    {
      auto r = TraceReader::open(path);
      ASSERT_TRUE(r.isOk()) << r.status().message();
      auto ops = (*r)->allOperands();
      ASSERT_TRUE(ops.isOk()) << "the intact file reads: " << ops.status().message();
      ASSERT_EQ(ops->at(0).row_digests.size(), static_cast<size_t>(rows));
    }
    {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
      const std::string sql = "UPDATE operands SET row_digests = " + how;
      ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
          << sqlite3_errmsg(db);
      sqlite3_close(db);
    }
    auto r = TraceReader::open(path);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    for (int way = 0; way < 2; ++way) {  // whole operands, and the diff's fingerprints alone
      Status st = way == 0 ? (*r)->allOperands().status() : (*r)->allOperandFingerprints().status();
      ASSERT_FALSE(st.isOk());
      EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << st.message();
      EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("row digests of operand slot 3"), std::string::npos)
          << st.message();
    }
  }
}

// A side file SQLite would open (-journal, -wal, -shm) that is a FIFO would block the open for
// good: it is named instead, and the open returns at once.
TEST(BadInput, ASideFileThatIsAPipeIsNamedWithoutBlocking) {
  Rng rng;
  for (const char* suffix : {"-journal", "-wal", "-shm"}) {
    SCOPED_TRACE(suffix);
    TempDir dir;
    const std::string path = makeTrace(dir, "proc-1.dtrace", rng.range(1, 50), rng);
    ASSERT_EQ(mkfifo((path + suffix).c_str(), 0600), 0);
    auto r = TraceReader::open(path);  // a hang here is the failure (ctest's timeout)
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(r.status().message().find(std::string(suffix) + " beside the trace is not a regular file"),
              std::string::npos) << r.status().message();
  }
}

// A table or column of the schema that the file lacks (damage, or an edit by hand) is named when
// the file opens, as damage, not met later as SQL's "no such table" from the first query.
TEST(BadInput, AMissingTableOrColumnIsDamageNamedWhenTheFileOpens) {
  Rng rng;
  struct Cut {
    const char* sql;
    const char* said;
  };
  const Cut cuts[] = {{"DROP TABLE gemms", "its gemms table is missing"},
                      {"DROP TABLE collectives", "its collectives table is missing"},
                      {"DROP TABLE strings", "its strings table is missing"},
                      {"ALTER TABLE gemms DROP COLUMN m", "its gemms table lacks the column m"},
                      {"DROP VIEW kernel_launches; ALTER TABLE events DROP COLUMN gpu_end_ns",
                       "its events table lacks the column gpu_end_ns"},
                      {"ALTER TABLE operands DROP COLUMN row_digests", "its operands table lacks the column row_digests"}};
  for (const Cut& cut : cuts) {
    SCOPED_TRACE(cut.sql);
    TempDir dir;
    const std::string path = makeTrace(dir, "proc-1.dtrace", rng.range(1, 50), rng);
    {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
      ASSERT_EQ(sqlite3_exec(db, cut.sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
      sqlite3_close(db);
    }
    auto r = TraceReader::open(path);
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << r.status().message();
    EXPECT_NE(r.status().message().find(cut.said), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  }
}

// An SQLite file with nothing committed (a process killed, or a disk that filled, before the first
// commit) is named as such, not as a foreign database.
TEST(BadInput, ATraceWithNothingCommittedSaysSo) {
  TempDir dir;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("empty.dtrace").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA page_size=16384; PRAGMA journal_mode=WAL;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto r = TraceReader::open(dir.file("empty.dtrace"));
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("holds no committed data"), std::string::npos) << r.status().message();
}

// A 50-event trace whose events were renumbered by `set` (an SQL expression of seq): its event
// count, which must be refused as damage.
Result<int64_t> countAfterRenumbering(Rng& rng, const char* set) {
  TempDir dir;
  std::string path = makeTrace(dir, "proc-1.dtrace", 50, rng);
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, fmt::format("UPDATE events SET seq = {}", set).c_str(), nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto r = TraceReader::open(path);
  if (!r.isOk()) return r.status();
  return (*r)->eventCount();
}

// Damage to fields that size what readers allocate is named instead of trusted: events numbered
// from elsewhere than 0 or with gaps, a world of two billion ranks.
TEST(BadInput, DamagedNumberingAndWorldSizeAreCorruptNotTrusted) {
  Rng rng;
  auto shifted = countAfterRenumbering(rng, "seq - 100");
  ASSERT_FALSE(shifted.isOk());
  EXPECT_EQ(shifted.status().code(), ErrorCode::kCorrupt) << shifted.status().message();
  auto sparse = countAfterRenumbering(rng, "seq * 1000000000");
  ASSERT_FALSE(sparse.isOk()) << "50 events numbered up to 4.9e10 read as " << *sparse;
  EXPECT_NE(sparse.status().message().find("numbering has gaps"), std::string::npos) << sparse.status().message();
  {
    TempDir dir;
    WriterOptions o;
    auto w = TraceWriter::create(dir.file("proc-1.dtrace"), o);
    ASSERT_TRUE(w.isOk());
    (*w)->setRank({0, 2'000'000'000, 0, 0, 1, "h", "GPU", ""});
    ASSERT_TRUE((*w)->close().isOk());
    auto r = Run::open(dir.path().string());
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << r.status().message();
  }
  // A world size edited to a 64-bit number (it read as its low 32 bits), or to one no larger than
  // the file's rank (0, negative, the rank itself).
  const int32_t rank = static_cast<int32_t>(rng.range(0, 7));
  const std::string sizes[] = {"9223372036854775807", fmt::format("{}", int64_t{1} << 33 | 4),
                               fmt::format("{}", -rng.range(0, 3)), fmt::format("{}", rank)};
  for (const std::string& size : sizes) {
    SCOPED_TRACE(size);
    TempDir dir;
    {
      auto w = TraceWriter::create(dir.file("proc-1.dtrace"), WriterOptions{});
      ASSERT_TRUE(w.isOk());
      (*w)->setRank({rank, rank + 1, 0, 0, 1, "h", "GPU", ""});
      ASSERT_TRUE((*w)->close().isOk());
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir.file("proc-1.dtrace").c_str(), &db), SQLITE_OK);
    const std::string sql = "UPDATE ranks SET world_size = " + size;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto r = Run::open(dir.path().string());
    ASSERT_FALSE(r.isOk()) << "a world of " << size << " for rank " << rank << " was trusted";
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << r.status().message();
  }
}

// Deleted rows of the strings table are named as damage when the file opens, not met later as
// "<bad string id N>" names and operands that cannot be found by name.
TEST(BadInput, DeletedStringsAreDamageNamedWhenTheFileOpens) {
  Rng rng;
  SCOPED_TRACE(rng.seed());
  TempDir dir;
  const std::string path = dir.file("proc-1.dtrace");
  const int64_t names = rng.range(5, 40);
  {
    auto w = TraceWriter::create(path, WriterOptions{});
    ASSERT_TRUE(w.isOk());
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < names; ++i) ids.push_back((*w)->intern(fmt::format("kernel_{}_{}", i, rng.u64())));
    for (int i = 0; i < 200; ++i) {
      (void)(*w)->append(testing::randomKernel(rng, ids[rng.range(0, names - 1)], -1));
      if (i == 100) {
        ASSERT_TRUE((*w)->flush().isOk());  // strings over more than one batch
      }
    }
    (void)(*w)->intern(fmt::format("late_{}", rng.u64()));
    ASSERT_TRUE((*w)->close().isOk());
  }
  {
    auto whole = TraceReader::open(path);
    ASSERT_TRUE(whole.isOk()) << whole.status().message();
    auto stats = (*whole)->stats();
    ASSERT_TRUE(stats.isOk());
    EXPECT_EQ(stats->at("strings_written"), names + 1);
  }
  auto exec = [&](const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  };
  const int64_t kept = rng.range(0, names);
  exec(fmt::format("DELETE FROM strings WHERE id > {}", kept));
  auto cut = TraceReader::open(path);
  ASSERT_FALSE(cut.isOk());
  EXPECT_EQ(cut.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(cut.status().message().find(fmt::format("holds {} of the {} names", kept, names + 1)),
            std::string::npos)
      << cut.status().message();
  // A file from before the count was kept: an empty table under events is still damage.
  exec("DELETE FROM strings; DELETE FROM stats WHERE key = 'strings_written'");
  auto empty = TraceReader::open(path);
  ASSERT_FALSE(empty.isOk());
  EXPECT_EQ(empty.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(empty.status().message().find("strings table is empty"), std::string::npos) << empty.status().message();
  auto run = Run::open(dir.path().string());
  EXPECT_FALSE(run.isOk() && !run->ranks().empty()) << "a damaged file is not read as a rank";
}

// Entries named like trace files that are not regular files are left out of a run with a warning
// each (a pipe would block a read; a dangling link has nothing to read).
TEST(BadInput, ARunLeavesOutWhatIsNotARegularTraceFileAndSaysSo) {
  TempDir dir;
  Rng rng;
  (void)makeTrace(dir, "proc-1.dtrace", 10, rng);
  ASSERT_EQ(mkfifo(dir.file("proc-2.dtrace").c_str(), 0600), 0);
  std::filesystem::create_symlink(dir.file("gone"), dir.file("proc-3.dtrace"));
  auto r = Run::open(dir.path().string());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->ranks().size(), 1u);
  ASSERT_EQ(r->warnings().size(), 2u);
  EXPECT_NE(r->warnings()[0].find("proc-2.dtrace is not a regular file"), std::string::npos) << r->warnings()[0];
  EXPECT_NE(r->warnings()[1].find("proc-3.dtrace is not a regular file"), std::string::npos) << r->warnings()[1];
}

TEST(BadInput, RunDirectoryErrors) {
  TempDir dir;
  Rng rng;
  auto empty = Run::open(dir.path().string());
  EXPECT_EQ(empty.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(empty.status().message().find("no trace files"), std::string::npos);
  writeFile(dir.file("manifest.json"), "{ not json");
  auto bad_manifest = Run::open(dir.path().string());
  EXPECT_EQ(bad_manifest.status().code(), ErrorCode::kNotATrace);
}

}  // namespace
}  // namespace detrace::db
