// Crash safety, for real: a child process writes batches and reports each committed one through a
// pipe; the parent SIGKILLs it mid-write, reopens the file and finds every reported batch intact.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

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

// Stats set again and again (the tracer's counters, published every second) reach the file on
// their own, without events to carry them: a process killed keeps the last value it flushed, and
// a counter that is added to keeps its sum. The child says each round's value before setting it,
// so the parent knows a value the writer's own timer may have committed before the round's flush.
[[noreturn]] void childStats(const std::string& path, int report_fd, uint64_t seed) {
  auto w = TraceWriter::create(path, WriterOptions{});
  if (!w.isOk()) _exit(3);
  std::mt19937_64 rng(seed);
  for (int64_t round = 1;; ++round) {
    int64_t total = static_cast<int64_t>(rng() >> 2);
    if (write(report_fd, &total, sizeof total) != sizeof total) _exit(5);
    (*w)->setStat("published_total", total);
    (*w)->addStat("added_rounds", 1);
    if (!(*w)->flush().isOk()) _exit(4);
  }
}

TEST(KillSafety, StatsSetWithoutEventsSurviveASigkill) {
  TempDir dir;
  std::string path = dir.file("stats.dtrace");
  const uint64_t seed = std::random_device{}();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    childStats(path, fds[1], seed);
  }
  close(fds[1]);
  int64_t total = 0;
  std::vector<int64_t> totals;  // every round's value, in order: all but the last one flushed
  while (totals.size() < 20 && read(fds[0], &total, sizeof total) == sizeof total) totals.push_back(total);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  while (read(fds[0], &total, sizeof total) == sizeof total) totals.push_back(total);
  close(fds[0]);
  ASSERT_GE(totals.size(), 20u);

  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto stats = (*r)->stats();
  ASSERT_TRUE(stats.isOk()) << stats.status().message();
  ASSERT_TRUE(stats->count("published_total")) << "seed " << seed;
  ASSERT_TRUE(stats->count("added_rounds"));
  // Every round but the last one begun was flushed; the last may have been committed too.
  const int64_t rounds = stats->at("added_rounds");
  const int64_t begun = static_cast<int64_t>(totals.size());
  ASSERT_GE(rounds, begun - 1) << "seed " << seed;
  ASSERT_LE(rounds, begun) << "seed " << seed;
  // Set before it was added to: the file holds this round's value, or the next one's where the
  // writer's timer committed between the two calls.
  const int64_t published = stats->at("published_total");
  const bool this_round = published == totals[static_cast<size_t>(rounds - 1)];
  const bool next_round = rounds < begun && published == totals[static_cast<size_t>(rounds)];
  EXPECT_TRUE(this_round || next_round) << "seed " << seed << ", " << rounds << " of " << begun;
}

// A stat set while another thread closes the writer goes out with close()'s last batch: a flush
// then has no commit of its own to wait for (it waited for one that never came, up to its limit).
TEST(KillSafety, AFlushAfterAStatSetDuringCloseDoesNotWaitForACommit) {
  TempDir dir;
  WriterOptions o;
  o.hold_in_batch = std::chrono::milliseconds(300);  // the closing batch takes a while
  auto w = TraceWriter::create(dir.file("closing.dtrace"), o);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  (*w)->setStat("before", 1);
  std::thread closer([&] { (void)(*w)->close(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (*w)->setStat("during_close", 2);
  const Status flushed = (*w)->flush(std::chrono::milliseconds(20'000));
  closer.join();
  EXPECT_NE(flushed.code(), ErrorCode::kUnavailable) << flushed.message();
  auto r = TraceReader::open(dir.file("closing.dtrace"));
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto stats = (*r)->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ(stats->count("before"), 1u);
  ASSERT_EQ(stats->count("during_close"), 1u) << "close() writes what was set while it ran";
  EXPECT_EQ(stats->at("during_close"), 2);
}

}  // namespace
}  // namespace detrace::db
