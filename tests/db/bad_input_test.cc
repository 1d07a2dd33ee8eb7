// Opening things that are not good traces gives one clear sentence and never crashes.
#include <sqlite3.h>

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
    EXPECT_EQ(r.status().code(), ErrorCode::kNotATrace) << name << ": " << r.status().message();
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
    // A truncated file must say it is damaged (or not a trace, when the header is gone).
    EXPECT_FALSE(st.isOk()) << "truncated to " << fraction << " read without error";
    if (!st.isOk()) {
      EXPECT_TRUE(st.code() == ErrorCode::kCorrupt || st.code() == ErrorCode::kNotATrace)
          << st.message();
      ++corrupt_or_ok;
    }
  }
  EXPECT_EQ(corrupt_or_ok, 4);
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
  int64_t committed = 0;
  Status st;
  for (int batch = 0; batch < 200 && st.isOk(); ++batch) {
    for (int i = 0; i < 500; ++i) (void)(*w)->append(testing::randomKernel(rng, id, -1));
    st = (*w)->flush();
    if (st.isOk()) committed = (batch + 1) * 500;
  }
  ASSERT_FALSE(st.isOk()) << "the quota never filled";
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
