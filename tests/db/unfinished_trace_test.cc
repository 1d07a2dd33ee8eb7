// A trace its writer never closed (its process was killed) keeps its last commits in its -wal:
// copied without it, or read where the reader cannot write SQLite's -shm index, the error says so
// and what to do, instead of "no committed data" or "unable to open database file".
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Writes `events` kernels to `path` in a child that commits them and exits without closing the
// writer, as a killed process leaves its trace: WAL mode, the commits in the -wal.
void writeUnclosed(const std::string& path, int events) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto w = TraceWriter::create(path, WriterOptions{});
    if (!w.isOk()) _exit(3);
    const int64_t name = (*w)->intern("kernel");
    testing::Rng rng;
    for (int i = 0; i < events; ++i) (void)(*w)->append(testing::randomKernel(rng, name, -1));
    _exit((*w)->flush().isOk() ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_TRUE(fs::exists(path + "-wal")) << "the child closed its trace after all";
}

TEST(UnfinishedTrace, ReadWithItsWalItHoldsEveryCommit) {
  TempDir dir;
  const std::string path = dir.file("proc-1.dtrace");
  ASSERT_NO_FATAL_FAILURE(writeUnclosed(path, 300));
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_FALSE((*r)->finished());
  EXPECT_EQ(*(*r)->eventCount(), 300);
}

TEST(UnfinishedTrace, CopiedWithoutItsWalTheErrorNamesTheWal) {
  TempDir dir;
  const std::string path = dir.file("proc-1.dtrace");
  ASSERT_NO_FATAL_FAILURE(writeUnclosed(path, 300));
  fs::create_directory(dir.file("copy"));
  const std::string copy = dir.file("copy/proc-1.dtrace");
  fs::copy_file(path, copy);
  auto r = TraceReader::open(copy);
  ASSERT_FALSE(r.isOk());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("proc-1.dtrace-wal, which is missing or empty"), std::string::npos) << m;
  EXPECT_NE(m.find("copy its -wal with it"), std::string::npos) << m;
  // A second read (the first may have left an empty -wal beside the copy) says the same.
  auto second = TraceReader::open(copy);
  ASSERT_FALSE(second.isOk());
  EXPECT_NE(second.status().message().find("copy its -wal with it"), std::string::npos) << second.status().message();
  fs::copy_file(path + "-wal", copy + "-wal", fs::copy_options::overwrite_existing);  // the reader may have made an empty one
  auto again = TraceReader::open(copy);
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_EQ(*(*again)->eventCount(), 300);
}

TEST(UnfinishedTrace, CutShortTheErrorSaysSo) {
  TempDir dir;
  const std::string path = dir.file("proc-1.dtrace");
  ASSERT_NO_FATAL_FAILURE(writeUnclosed(path, 10));
  fs::resize_file(path, 50);
  auto r = TraceReader::open(path);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find("cut short (50 bytes"), std::string::npos) << r.status().message();
}

// What TraceReader::open says to uid 65534 (another user) about `path`: "opened" or its error;
// "<cannot enter>" where that user cannot reach the file at all (a private TMPDIR).
std::string openAsAnotherUser(const std::string& path) {
  int fds[2];
  if (pipe(fds) != 0) return "<pipe failed>";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    struct stat st {};
    std::string m = "<cannot enter>";
    if (::stat(path.c_str(), &st) == 0) {
      auto r = TraceReader::open(path);
      m = r.isOk() ? "opened" : r.status().message();
    }
    (void)!write(fds[1], m.data(), m.size());
    _exit(0);
  }
  close(fds[1]);
  std::string m;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) m.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? m : "<child failed>";
}

// A run directory of an unfinished trace that only root may write, readable by all.
std::string readOnlyRun(const TempDir& dir, bool with_wal) {
  const std::string run = dir.file("run");
  fs::create_directory(run);
  const std::string path = run + "/proc-1.dtrace";
  writeUnclosed(path, 300);
  fs::remove(path + "-shm");
  if (!with_wal) fs::remove(path + "-wal");
  for (const std::string& p : {dir.path().string(), run}) (void)chmod(p.c_str(), 0755);
  for (const std::string& p : {path, path + "-wal"}) (void)chmod(p.c_str(), 0644);
  return path;
}

// Another user reading the trace in a directory they cannot write, without the -shm a reader
// would have made, and a copy without its -wal there: each error says why and what to do. Root
// only (it reads as another user); skipped otherwise.
TEST(UnfinishedTrace, InADirectoryTheReaderCannotWriteTheErrorSaysToCopyIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to read as another user";
  {
    TempDir dir;
    const std::string path = readOnlyRun(dir, /*with_wal=*/true);
    const std::string m = openAsAnotherUser(path);
    if (m == "<cannot enter>") GTEST_SKIP() << "uid 65534 cannot reach " << path;
    EXPECT_NE(m.find("is not writable for you"), std::string::npos) << m;
    EXPECT_NE(m.find("cp -r " + dir.file("run") + " /tmp/"), std::string::npos) << m;
  }
  {
    TempDir dir;
    const std::string m = openAsAnotherUser(readOnlyRun(dir, /*with_wal=*/false));
    EXPECT_NE(m.find("cannot be read here"), std::string::npos) << m;
    EXPECT_NE(m.find("copy its -wal with it"), std::string::npos) << m;
  }
}

// A process killed while its trace was being created leaves the file with a rollback journal
// beside it (the writer turns WAL on after creating its tables). A reader may not roll it back
// (SQLite's words: "attempt to write a readonly database"); the error says what happened.
TEST(UnfinishedTrace, AFileCutShortWhileItWasCreatedSaysSo) {
  TempDir tmp;
  const std::string path = tmp.file("proc-9.dtrace");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // a transaction that spilled pages into the file, never committed
    sqlite3* db = nullptr;
    if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) _exit(3);
    if (sqlite3_exec(db, "PRAGMA cache_size=1; CREATE TABLE t(x BLOB); BEGIN;", nullptr, nullptr, nullptr) != SQLITE_OK) _exit(4);
    for (int i = 0; i < 200; ++i) {
      if (sqlite3_exec(db, "INSERT INTO t VALUES (randomblob(4000));", nullptr, nullptr, nullptr) != SQLITE_OK) _exit(5);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::error_code ec;
  ASSERT_GT(fs::file_size(path + "-journal", ec), 0u) << "no journal was left: the test proves nothing";
  auto r = TraceReader::open(path);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find(path + " was cut short while its process created it"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().code(), ErrorCode::kNoData) << "a run of several leaves it out";
  EXPECT_TRUE(fs::exists(path + "-journal")) << "the reader must not have touched it";
}

}  // namespace
}  // namespace detrace::db
