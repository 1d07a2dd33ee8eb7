// A program that closes descriptors it did not open (a daemon closing everything above stderr, a
// dup2 onto "a free number") must lose at most the rest of its trace, never its own files: the
// writer's descriptors sit high, are checked before each batch, and a number that no longer names
// the trace is never written, locked or closed through again (sqlite_fd_guard.h, held_fd.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

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
std::string hostFile(const TempDir& dir, testing::Rng& rng) {
  std::string path = dir.file("host.log");
  std::string content;
  for (int i = 0; i < 4096; ++i) content.push_back(static_cast<char>('a' + rng.range(0, 25)));
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

}  // namespace
}  // namespace detrace::db
