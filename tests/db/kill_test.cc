// Crash safety, for real: a child process writes batches and reports each committed one through a
// pipe; the parent SIGKILLs it mid-write, reopens the file and finds every reported batch intact.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::TempDir;

constexpr int kBatch = 5000;

// Child: writes batches forever; after each flush reports the committed event count.
[[noreturn]] void childWriter(const std::string& path, int report_fd) {
  WriterOptions o;
  o.policy = OverflowPolicy::kBlock;
  auto w = TraceWriter::create(path, o);
  if (!w.isOk()) _exit(3);
  int64_t id = (*w)->intern("kernel");
  testing::Rng rng;
  for (int64_t batch = 0;; ++batch) {
    for (int i = 0; i < kBatch; ++i) {
      Event e = testing::randomKernel(rng, id, -1);
      e.correlation_id = batch * kBatch + i;  // lets the parent check each row's identity
      (void)(*w)->append(e);
    }
    if (!(*w)->flush().isOk()) _exit(4);
    int64_t committed = (batch + 1) * kBatch;
    if (write(report_fd, &committed, sizeof committed) != sizeof committed) _exit(5);
  }
}

TEST(KillSafety, SigkillMidWriteKeepsEveryCommittedBatch) {
  TempDir dir;
  std::string path = dir.file("killed.dtrace");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    childWriter(path, fds[1]);
  }
  close(fds[1]);
  int64_t committed = 0, reported = 0;
  // Let it commit a few batches, then kill it while it is writing the next ones.
  while (committed < 8 * kBatch && read(fds[0], &reported, sizeof reported) == sizeof reported) {
    committed = reported;
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own with " << WEXITSTATUS(status);
  // Batches the child committed after our last read also count; drain the pipe.
  while (read(fds[0], &reported, sizeof reported) == sizeof reported) committed = reported;
  close(fds[0]);

  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_FALSE((*r)->finished()) << "a killed writer's file reads as closed";
  auto count = (*r)->eventCount();
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_GE(*count, committed);
  EXPECT_EQ(testing::rowsInOrder(**r), *count);
}

}  // namespace
}  // namespace detrace::db
