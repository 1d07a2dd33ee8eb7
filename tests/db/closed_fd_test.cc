// A program that closes descriptors it did not open (a daemon closing everything above stderr, a
// dup2 onto "a free number") must lose at most the rest of its trace, never its own files: the
// writer's descriptors sit high, are checked before each batch, and a number that no longer names
// the trace is never written, locked or closed through again (sqlite_fd_guard.h, held_fd.h).
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "detrace/base/held_fd.h"
#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::TempDir;

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The program's own file, with content of its own.
std::string hostFile(const TempDir& dir, testing::Rng& rng, int bytes = 4096) {
  std::string path = dir.file("host.log");
  std::string content;
  for (int i = 0; i < bytes; ++i) content.push_back(static_cast<char>('a' + rng.range(0, 25)));
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Every descriptor of this process that names `path`, its -wal or its -shm.
std::vector<int> descriptorsOf(const std::string& path) {
  std::set<std::pair<dev_t, ino_t>> files;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st {};
    if (::stat((path + suffix).c_str(), &st) == 0) files.emplace(st.st_dev, st.st_ino);
  }
  std::vector<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::stoi(entry.path().filename().string());
    struct stat st {};
    if (fstat(fd, &st) == 0 && files.count({st.st_dev, st.st_ino}) != 0) fds.push_back(fd);
  }
  return fds;
}

bool isOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

void appendKernels(TraceWriter& w, testing::Rng& rng, int n) {
  int64_t name = w.intern("kernel");
  for (int i = 0; i < n; ++i) ASSERT_TRUE(w.append(testing::randomKernel(rng, name, -1)).has_value());
}

TEST(HeldFd, SitsHighAndClosesOnlyWhatItStillNames) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string host = hostFile(dir, rng);
  const std::string before = readAll(host);

  HeldFd held(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(held);
  ASSERT_GT(highFdBase(), 0) << "RLIMIT_NOFILE below 128 here";
  EXPECT_GE(held.get(), highFdBase());
  EXPECT_TRUE(held.intact());

  // The program puts its own file on the number.
  int theirs = ::open(host.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(theirs, 0);
  const int number = held.get();
  ASSERT_EQ(dup2(theirs, number), number);
  ::close(theirs);
  EXPECT_FALSE(held.intact());
  EXPECT_FALSE(held.reset());
  EXPECT_TRUE(isOpen(number)) << "the program's descriptor was closed";
  char first = 0;
  EXPECT_EQ(pread(number, &first, 1, 0), 1);
  EXPECT_EQ(first, before[0]);
  ::close(number);

  HeldFd mine(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int n2 = mine.get();
  EXPECT_TRUE(mine.reset());
  EXPECT_FALSE(isOpen(n2));
}

// The worst case: the program closes the trace's descriptors and opens its own file on each
// number. Nothing more may reach that file, and what was committed before stays readable.
TEST(ClosedDescriptors, AFileOfTheProgramsOnTheTracesNumbersIsNeverTouched) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string path = dir.file("trace.dtrace");
  const std::string host = hostFile(dir, rng);
  const std::string before = readAll(host);
  const int committed = static_cast<int>(rng.range(100, 3000));

  auto w = TraceWriter::create(path);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  appendKernels(**w, rng, committed);
  ASSERT_TRUE((*w)->flush().isOk());

  std::vector<int> numbers = descriptorsOf(path);
  ASSERT_GE(numbers.size(), 2u) << "expected the trace and its WAL open";
  for (int fd : numbers) EXPECT_GE(fd, highFdBase()) << "a trace descriptor among the low numbers";
  int theirs = ::open(host.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(theirs, 0);
  for (int fd : numbers) ASSERT_EQ(dup2(theirs, fd), fd);
  ::close(theirs);

  appendKernels(**w, rng, static_cast<int>(rng.range(100, 3000)));
  Status st = (*w)->flush();
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("closed the trace's file descriptor"), std::string::npos) << st.message();
  EXPECT_FALSE((*w)->close().isOk());
  w->reset();

  EXPECT_TRUE(readAll(host) == before) << "the program's file was written through a stale number";
  for (int fd : numbers) {
    EXPECT_TRUE(isOpen(fd)) << "the program's descriptor " << fd << " was closed";
    ::close(fd);
  }
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto count = (*reader)->eventCount();
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_EQ(*count, committed);
}

// The daemon's way: everything above stderr closed, nothing reopened. The trace stops with an
// error that says why; the program goes on.
TEST(ClosedDescriptors, ClosedNumbersStopTheTraceWithAReason) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string path = dir.file("trace.dtrace");
  const int committed = static_cast<int>(rng.range(100, 3000));
  auto w = TraceWriter::create(path);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  appendKernels(**w, rng, committed);
  ASSERT_TRUE((*w)->flush().isOk());
  for (int fd : descriptorsOf(path)) ::close(fd);

  appendKernels(**w, rng, 10);
  Status st = (*w)->flush();
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("closed the trace's file descriptor"), std::string::npos) << st.message();
  EXPECT_TRUE((*w)->failed());
  w->reset();

  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto count = (*reader)->eventCount();
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_EQ(*count, committed);
}

// A writer that failed for another reason first (its quota): the program then takes its numbers.
// The close that follows (SQLite's checkpoint, truncation and unlock) must not reach the file.
TEST(ClosedDescriptors, AWriterThatFailedBeforeStillClosesWithoutTouchingTheProgramsFile) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string path = dir.file("trace.dtrace");
  const std::string host = hostFile(dir, rng, 1 << 20);  // as large as the trace: pages to overwrite
  const std::string before = readAll(host);
  WriterOptions options;
  options.max_pages = 40;  // 640 KiB: full after a few batches
  auto w = TraceWriter::create(path, options);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  Status st = Status::ok();
  for (int round = 0; round < 200 && st.isOk(); ++round) {
    appendKernels(**w, rng, 2000);
    st = (*w)->flush();
  }
  ASSERT_FALSE(st.isOk()) << "the quota never filled";
  std::vector<int> numbers = descriptorsOf(path);
  ASSERT_GE(numbers.size(), 2u);
  int theirs = ::open(host.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(theirs, 0);
  for (int fd : numbers) ASSERT_EQ(dup2(theirs, fd), fd);
  ::close(theirs);
  EXPECT_FALSE((*w)->close().isOk());
  w->reset();
  EXPECT_TRUE(readAll(host) == before) << "the program's file was written by the close";
  for (int fd : numbers) {
    EXPECT_TRUE(isOpen(fd)) << "the program's descriptor " << fd << " was closed";
    ::close(fd);
  }
}

// After a daemon-style close, the numbers a new trace is given are the lost ones again (the
// lowest free above the base). The new trace must get numbers of its own and work, and the old
// writer's handles must never reach it.
TEST(ClosedDescriptors, ATraceOpenedAfterLostNumbersWorks) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  auto old_writer = TraceWriter::create(dir.file("old.dtrace"));
  ASSERT_TRUE(old_writer.isOk()) << old_writer.status().message();
  appendKernels(**old_writer, rng, 100);
  ASSERT_TRUE((*old_writer)->flush().isOk());
  for (int fd : descriptorsOf(dir.file("old.dtrace"))) ::close(fd);
  appendKernels(**old_writer, rng, 10);
  EXPECT_FALSE((*old_writer)->flush().isOk());

  const std::string path = dir.file("new.dtrace");
  const int n = static_cast<int>(rng.range(100, 3000));
  auto w = TraceWriter::create(path);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  appendKernels(**w, rng, n);
  ASSERT_TRUE((*w)->flush().isOk());
  EXPECT_FALSE((*old_writer)->close().isOk());  // its handles' close must not close the new files
  old_writer->reset();
  appendKernels(**w, rng, n);
  Status st = (*w)->close();
  ASSERT_TRUE(st.isOk()) << st.message();
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto count = (*reader)->eventCount();
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_EQ(*count, 2 * n);
}

// Whether another process would see a lock on the database's SHARED range, which a connection in
// WAL mode holds for as long as it is open.
bool lockedFromOutside(const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(path.c_str(), O_RDWR);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0x40000002;  // SQLite's shared-lock range
    fl.l_len = 510;
    _exit(fd >= 0 && fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}

// A second connection of this process to a live trace: its descriptor is not moved (closing the
// low number would drop the POSIX locks the writer's connection holds on the same file).
TEST(ClosedDescriptors, ASecondConnectionKeepsTheWritersLocks) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string path = dir.file("trace.dtrace");
  auto w = TraceWriter::create(path);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  appendKernels(**w, rng, 100);
  ASSERT_TRUE((*w)->flush().isOk());
  ASSERT_TRUE(lockedFromOutside(path)) << "the writer's connection holds no lock: the test shows nothing";
  sqlite3* second = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &second, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(second, "SELECT count(*) FROM events", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_TRUE(lockedFromOutside(path)) << "opening a second connection dropped the writer's locks";
  sqlite3_close(second);
  EXPECT_TRUE((*w)->close().isOk());
}

// Runs `body` in a child process under `ulimit -n 100` (below 128: no room to move descriptors
// high, and the kernel hands a closed number straight back) and returns its exit status: what
// `body` returns, 3 if the limit could not be set, -1 if the child did not exit by itself.
int exitStatusUnderLowFdLimit(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 100;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0 || highFdBase() != -1) _exit(3);
    _exit(body());
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// With `ulimit -n` below 128 there is no room to move descriptors high: the trace keeps the
// numbers it was given, is still checked, and works.
TEST(ClosedDescriptors, ALowDescriptorLimitLeavesNumbersWhereTheyAreAndTheTraceWorks) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string path = dir.file("trace.dtrace");
  const int n = static_cast<int>(rng.range(100, 3000));
  const int status = exitStatusUnderLowFdLimit([&] {
    auto w = TraceWriter::create(path);
    if (!w.isOk()) return 4;
    int64_t name = (*w)->intern("kernel");
    for (int i = 0; i < n; ++i) (void)(*w)->append(testing::randomKernel(rng, name, -1));
    if (!(*w)->flush().isOk()) return 5;
    for (int fd : descriptorsOf(path)) {
      if (fd >= 100) return 6;
    }
    return (*w)->close().isOk() ? 0 : 7;
  });
  ASSERT_EQ(status, 0) << "3: limit not set, 4: create, 5: flush, 6: a number moved, 7: close";
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto count = (*reader)->eventCount();
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_EQ(*count, n);
}

// Where the program's own SQLite is the tracer's too (a build without libsqlite3.a, or any
// process that links detrace_db), a database of the program's may be opened on a lost trace
// number. It must work, and the writer's stale handle must never reach it: not its batches, not
// its close's checkpoint. The low limit makes the kernel hand the lost number straight back.
TEST(ClosedDescriptors, AProgramsDatabaseOpenedOnALostNumberWorksAndIsUntouched) {
  TempDir dir;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string path = dir.file("trace.dtrace"), theirs = dir.file("program.db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(theirs.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, fmt::format("CREATE TABLE t(x); INSERT INTO t VALUES (randomblob({}));",
                                           rng.range(50000, 200000)).c_str(),
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const std::string before = readAll(theirs);
  const int status = exitStatusUnderLowFdLimit([&] {
    auto w = TraceWriter::create(path);
    if (!w.isOk()) return 4;
    int64_t name = (*w)->intern("kernel");
    for (int i = 0; i < 500; ++i) (void)(*w)->append(testing::randomKernel(rng, name, -1));
    if (!(*w)->flush().isOk()) return 5;
    struct stat trace_st {};
    if (::stat(path.c_str(), &trace_st) != 0) return 6;
    int main_fd = -1;
    for (int fd : descriptorsOf(path)) {
      struct stat st {};
      if (fstat(fd, &st) == 0 && st.st_ino == trace_st.st_ino) main_fd = fd;
    }
    if (main_fd < 0) return 6;
    ::close(main_fd);  // the program closes one descriptor it did not open
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(theirs.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) return 7;
    if (sqlite3_exec(db, "SELECT count(*) FROM t", nullptr, nullptr, nullptr) != SQLITE_OK) return 8;
    for (int i = 0; i < 500; ++i) (void)(*w)->append(testing::randomKernel(rng, name, -1));
    if ((*w)->flush().isOk()) return 9;  // the lost number must stop the trace
    (void)(*w)->close();
    if (sqlite3_exec(db, "SELECT count(*) FROM t", nullptr, nullptr, nullptr) != SQLITE_OK) return 10;
    sqlite3_close(db);
    return 0;
  });
  EXPECT_EQ(status, 0)
      << "3: limit, 4: create, 5: flush, 6: no trace descriptor, 7: the program's open failed, 8: its "
         "query failed, 9: the trace went on through a lost number, 10: its query failed after the close";
  EXPECT_TRUE(readAll(theirs) == before) << "the program's database was written by the tracer";
}

}  // namespace
}  // namespace detrace::db
