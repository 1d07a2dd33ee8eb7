// lastingThreadLocal: per-thread state that is freed at thread exit and stays usable after the
// thread's thread_local destructors ran (the main thread's run in exit(), before atexit handlers
// and static destructors, which may still call the libraries the tracer wraps).
#include <fcntl.h>
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
  Counted() noexcept { ++live; }
  ~Counted() { --live; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  int value = 0;
};

struct CountedTag;
Counted& counted() { return lastingThreadLocal<Counted, CountedTag>(); }

TEST(LastingThreadLocal, EachThreadHasItsOwnFreedWhenTheThreadExits) {
  std::mt19937 rng(std::random_device{}());
  const int mine = static_cast<int>(rng() % 1000) + 1;
  counted().value = mine;
  const int before = Counted::live.load();
  for (int round = 0; round < 4; ++round) {
    const int theirs = mine + 1 + static_cast<int>(rng() % 1000);
    int seen_first = -1, seen_after = -1;
    std::thread t([&] {
      seen_first = counted().value;  // a fresh one
      counted().value = theirs;
      seen_after = counted().value;
    });
    t.join();
    EXPECT_EQ(seen_first, 0);
    EXPECT_EQ(seen_after, theirs);
    EXPECT_EQ(Counted::live.load(), before) << "the thread's state outlived it";
    EXPECT_EQ(counted().value, mine) << "another thread's write reached this one";
  }
  struct OtherTag;
  EXPECT_EQ((lastingThreadLocal<Counted, OtherTag>().value), 0) << "two tags, one state";
}

// A thread's own thread_local made before the thread's first use of the state is destroyed after
// the state (destructors run newest first): using the state from its destructor finds a fresh,
// usable one (built again, then left), never the destroyed one. One made after the first use is
// destroyed before the state and still sees what the thread wrote.
TEST(LastingThreadLocal, AThreadLocalDestructorUsingTheStateFindsAUsableOne) {
  struct Probe {
    int* seen;
    ~Probe() {
      *seen = counted().value;
      counted().value = -1;  // would write into a destroyed object were it the reaped one
    }
  };
  std::mt19937 rng(std::random_device{}());
  const int written = 1 + static_cast<int>(rng() % 1000);
  for (bool before : {true, false}) {
    SCOPED_TRACE(before ? "made before the state" : "made after the state");
    int seen = -2;
    const int live_before = Counted::live.load();
    std::thread t([&] {
      if (before) {
        thread_local Probe early{&seen};
        (void)early;
      }
      counted().value = written;
      if (!before) {
        thread_local Probe late{&seen};
        (void)late;
      }
    });
    t.join();
    EXPECT_EQ(seen, before ? 0 : written);
    // Built again after its destroyer ran, the state is never destroyed: one more lives on.
    EXPECT_EQ(Counted::live.load(), live_before + (before ? 1 : 0));
  }
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
  _exit(0);  // the TLS destructors have run; the test binary's static ones need not (a fork)
}

TEST(LastingThreadLocal, AnAtexitHandlerGetsAFreshStateNotTheDestroyedOne) {
  std::mt19937 rng(std::random_device{}());
  const size_t filled = 1000 + rng() % 100000;
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  std::fflush(nullptr);
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
