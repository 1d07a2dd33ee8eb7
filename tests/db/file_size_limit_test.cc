// A trace that outgrows the process's file-size limit (`ulimit -f`) ends the trace, not the
// process: the writer's writes past the limit fail with EFBIG and raise SIGXFSZ, whose default
// action would end a traced program. Each case runs in a child with the limit set and SIGXFSZ at
// its default, and reports through a pipe what it saw; the parent checks that the child exited by
// itself and that the file holds every batch the child saw committed.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::TempDir;

constexpr int kBatch = 2000;

// What the child reports at its end (one write on the pipe).
struct Report {
  int64_t committed = -1;  // events the child saw committed before the first failure
  bool created = false;    // TraceWriter::create succeeded
  bool failed = false;     // a flush or create failed
  bool mask_restored = false;  // SIGXFSZ not left blocked on the calling thread
  char message[512] = {};  // the failure's message
};

void copyMessage(Report& r, const std::string& text) {
  std::strncpy(r.message, text.c_str(), sizeof r.message - 1);
}

bool xfszBlocked() {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, SIGXFSZ) == 1;
}

// Child: sets the limit, then writes batches of numbered events until a flush fails (at most
// `max_batches`), closes the writer and reports.
[[noreturn]] void childWriter(const std::string& path, rlim_t limit_bytes, int report_fd) {
  signal(SIGXFSZ, SIG_DFL);
  rlimit lim{};
  getrlimit(RLIMIT_FSIZE, &lim);
  lim.rlim_cur = limit_bytes;
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
  Report r;
  WriterOptions o;
  o.policy = OverflowPolicy::kBlock;
  auto w = TraceWriter::create(path, o);
  r.created = w.isOk();
  r.mask_restored = !xfszBlocked();
  if (!w.isOk()) {
    r.failed = true;
    copyMessage(r, w.status().message());
  } else {
    int64_t id = (*w)->intern("kernel");
    testing::Rng rng;
    r.committed = 0;
    for (int64_t batch = 0; batch < 400; ++batch) {
      for (int i = 0; i < kBatch; ++i) {
        Event e = testing::randomKernel(rng, id, -1);
        e.correlation_id = batch * kBatch + i;
        (void)(*w)->append(e);
      }
      Status st = (*w)->flush();
      if (!st.isOk()) {
        r.failed = true;
        copyMessage(r, st.message());
        break;
      }
      r.committed = (batch + 1) * kBatch;
    }
    (void)(*w)->close();  // the final commit and checkpoint run on this thread: shielded too
    r.mask_restored = r.mask_restored && !xfszBlocked();
  }
  if (write(report_fd, &r, sizeof r) != sizeof r) _exit(4);
  _exit(0);
}

Report runChild(const std::string& path, rlim_t limit_bytes) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  EXPECT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    childWriter(path, limit_bytes, fds[1]);
  }
  close(fds[1]);
  Report r;
  ssize_t n = read(fds[0], &r, sizeof r);
  close(fds[0]);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_FALSE(WIFSIGNALED(status)) << "the writer's process was ended by signal " << WTERMSIG(status)
                                    << (WTERMSIG(status) == SIGXFSZ ? " (SIGXFSZ)" : "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(n, static_cast<ssize_t>(sizeof r)) << "the child reported nothing";
  return r;
}

TEST(FileSizeLimit, ALimitReachedMidRecordingEndsTheTraceNotTheProcess) {
  TempDir dir;
  std::string path = dir.file("limited.dtrace");
  Report r = runChild(path, rlim_t{3} << 20);  // 3 MiB: the schema fits, a few batches do
  ASSERT_TRUE(r.created) << r.message;
  ASSERT_TRUE(r.failed) << "400 batches fitted under the limit";
  EXPECT_GT(r.committed, 0) << "not one batch fitted";
  EXPECT_TRUE(r.mask_restored);
  EXPECT_NE(std::string(r.message).find("file-size limit"), std::string::npos) << r.message;

  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_FALSE((*reader)->finished()) << "a trace cut short by the limit reads as closed";
  auto count = (*reader)->eventCount();
  ASSERT_TRUE(count.isOk()) << count.status().message();
  EXPECT_EQ(*count, r.committed);
  EXPECT_EQ(testing::rowsInOrder(**reader), r.committed);  // every committed row, in order
}

TEST(FileSizeLimit, ALimitTooSmallForTheSchemaFailsTheCreateNotTheProcess) {
  TempDir dir;
  Report r = runChild(dir.file("tiny.dtrace"), rlim_t{64} << 10);  // 64 KiB: under the schema's WAL
  EXPECT_FALSE(r.created);
  EXPECT_TRUE(r.failed);
  EXPECT_TRUE(r.mask_restored);
  EXPECT_NE(std::string(r.message).find("file-size limit"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace detrace::db
