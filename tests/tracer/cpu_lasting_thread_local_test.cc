// lastingThreadLocal: per-thread state that is freed at thread exit and stays usable after the
// thread's thread_local destructors ran (the main thread's run in exit(), before atexit handlers
// and static destructors, which may still call the libraries the tracer wraps).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "detrace/tracer/lasting_thread_local.h"

namespace detrace::tracer {
namespace {

struct Counted {
  static inline std::atomic<int> live{0};
  Counted() { ++live; }
  ~Counted() { --live; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  int value = 0;
};

TEST(LastingThreadLocal, EachThreadHasItsOwnFreedWhenTheThreadExits) {
  std::mt19937 rng(std::random_device{}());
  const int mine = static_cast<int>(rng() % 1000) + 1;
  lastingThreadLocal<Counted>().value = mine;
  const int before = Counted::live.load();
  for (int round = 0; round < 4; ++round) {
    const int theirs = mine + 1 + static_cast<int>(rng() % 1000);
    int seen_first = -1, seen_after = -1;
    std::thread t([&] {
      seen_first = lastingThreadLocal<Counted>().value;  // a fresh one
      lastingThreadLocal<Counted>().value = theirs;
      seen_after = lastingThreadLocal<Counted>().value;
    });
    t.join();
    EXPECT_EQ(seen_first, 0);
    EXPECT_EQ(seen_after, theirs);
    EXPECT_EQ(Counted::live.load(), before) << "the thread's state outlived it";
    EXPECT_EQ(lastingThreadLocal<Counted>().value, mine) << "another thread's write reached this one";
  }
  struct OtherTag;
  EXPECT_EQ((lastingThreadLocal<Counted, OtherTag>().value), 0) << "two tags, one state";
}

// In a child whose state holds a large vector: an atexit handler (run after the main thread's
// thread_local destructors) gets a fresh, empty, usable state, not the freed one, whose size
// would still read as before.
std::vector<int>& exitState() {
  struct ExitTag;
  return lastingThreadLocal<std::vector<int>, ExitTag>();
}

void atExit() {
  std::vector<int>& v = exitState();
  const size_t size = v.size();
  v.assign(4096, 1);  // would write into freed memory were it the destroyed state
  std::printf("size at exit %zu, now %zu\n", size, v.size());
  std::fflush(stdout);
}

TEST(LastingThreadLocal, AnAtexitHandlerGetsAFreshStateNotTheDestroyedOne) {
  std::mt19937 rng(std::random_device{}());
  const size_t filled = 1000 + rng() % 100000;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDOUT_FILENO);
    exitState().assign(filled, 7);
    std::atexit(atExit);
    std::exit(0);  // runs the thread_local destructors, then atExit
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << out;
  EXPECT_EQ(out, "size at exit 0, now 4096\n") << "filled with " << filled;
}

}  // namespace
}  // namespace detrace::tracer
