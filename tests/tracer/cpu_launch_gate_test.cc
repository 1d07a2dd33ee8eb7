// LaunchGate (launch_gate.h): a launch of an executable graph from one thread waits for another
// thread's launch of it to end before pointing the graph's cells, up to a deadline. Real threads,
// a real mutex and condition variable, as graph_fingerprints.cc uses them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "detrace/tracer/launch_gate.h"

namespace detrace::tracer {
namespace {

using Clock = std::chrono::steady_clock;
using Gate = LaunchGate<std::shared_ptr<int>>;

struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  Gate gate;
};

Gate::Entry enterFor(Shared& s, std::chrono::milliseconds wait) {
  std::unique_lock lk(s.mu);
  return s.gate.enter(lk, s.cv, wait, std::this_thread::get_id());
}

TEST(LaunchGate, FreeWhenNothingIsOpenOrOnlyThisThreadsOwn) {
  Shared s;
  EXPECT_EQ(enterFor(s, std::chrono::milliseconds(0)), Gate::Entry::kFree);
  auto mine = std::make_shared<int>(1);
  s.gate.open(mine, std::this_thread::get_id());
  // This thread's own open launch (an end it never saw) must not make it wait on itself.
  const auto t0 = Clock::now();
  EXPECT_EQ(enterFor(s, std::chrono::milliseconds(500)), Gate::Entry::kFree);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(400));
  EXPECT_EQ(s.gate.openLaunch(), mine);
}

TEST(LaunchGate, AnotherThreadWaitsUntilTheOpenLaunchEnds) {
  Shared s;
  auto first = std::make_shared<int>(1);
  s.gate.open(first, std::this_thread::get_id());
  std::atomic<bool> closed{false};
  Gate::Entry got = Gate::Entry::kFree;
  std::thread other([&] {
    got = enterFor(s, std::chrono::seconds(30));
    EXPECT_TRUE(closed.load()) << "entered while the first launch was still open";
  });
  // Close only once the other thread is really waiting (or it has already, wrongly, entered).
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  for (bool waiting = false; !waiting && Clock::now() < give_up;) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::lock_guard lk(s.mu);
    waiting = s.gate.waiters() == 1;
  }
  {
    std::lock_guard lk(s.mu);
    closed = true;
    EXPECT_TRUE(s.gate.close(first)) << "a thread waits: the caller must notify";
    s.cv.notify_all();
  }
  other.join();
  EXPECT_EQ(got, Gate::Entry::kWaited);
  EXPECT_FALSE(s.gate.openLaunch());
  EXPECT_EQ(s.gate.waiters(), 0);
}

TEST(LaunchGate, GivesUpAfterTheWaitAndNamesTheLaunchStillOpen) {
  Shared s;
  auto stuck = std::make_shared<int>(7);
  std::thread opener([&] {
    std::lock_guard lk(s.mu);
    s.gate.open(stuck, std::this_thread::get_id());
  });
  opener.join();  // its launch never ends
  const auto t0 = Clock::now();
  std::unique_lock lk(s.mu);
  EXPECT_EQ(s.gate.enter(lk, s.cv, std::chrono::milliseconds(30), std::this_thread::get_id()),
            Gate::Entry::kTimedOut);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(30));
  EXPECT_EQ(s.gate.openLaunch(), stuck);
  EXPECT_EQ(s.gate.waiters(), 0);
}

// No time to wait gives up at once, even with the open launch's closer waiting for the lock: a
// zero wait must not let it in.
TEST(LaunchGate, AZeroWaitNeverWaits) {
  Shared s;
  auto first = std::make_shared<int>(1);
  std::thread opener([&] {
    std::lock_guard lk(s.mu);
    s.gate.open(first, std::this_thread::get_id());
  });
  opener.join();
  std::unique_lock lk(s.mu);
  std::thread closer([&] {
    std::lock_guard clk(s.mu);  // queued on the lock while the entry below runs
    if (s.gate.close(first)) s.cv.notify_all();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the closer is now blocked
  EXPECT_EQ(s.gate.enter(lk, s.cv, std::chrono::microseconds(0), std::this_thread::get_id()),
            Gate::Entry::kTimedOut);
  EXPECT_EQ(s.gate.openLaunch(), first) << "the lock was let go during a zero wait";
  lk.unlock();
  closer.join();
  EXPECT_FALSE(s.gate.openLaunch());
}

TEST(LaunchGate, OnlyTheOpenLaunchClosesIt) {
  Shared s;
  auto older = std::make_shared<int>(1), newer = std::make_shared<int>(2);
  EXPECT_FALSE(s.gate.close(older)) << "nothing open";
  s.gate.open(older, std::this_thread::get_id());
  s.gate.open(newer, std::this_thread::get_id());  // the same thread's next launch took it
  EXPECT_FALSE(s.gate.close(older));
  EXPECT_EQ(s.gate.openLaunch(), newer);
  EXPECT_FALSE(s.gate.close(newer)) << "no waiter: nothing to notify";
  EXPECT_FALSE(s.gate.openLaunch());
}

// Several threads launching one graph as graph_fingerprints.cc does (enter, open; the launch call;
// close, notify): no two threads' launches are ever between open and close at once, and with a
// generous deadline none gives up.
TEST(LaunchGate, LaunchesFromManyThreadsNeverOverlap) {
  Shared s;
  constexpr int kThreads = 4, kLaunches = 300;
  std::atomic<int> inside{0}, most{0}, timed_out{0}, waited{0};
  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < kLaunches; ++i) {
      auto launch = std::make_shared<int>(i);
      {
        std::unique_lock lk(s.mu);
        const Gate::Entry e =
            s.gate.enter(lk, s.cv, std::chrono::seconds(30), std::this_thread::get_id());
        if (e == Gate::Entry::kTimedOut) ++timed_out;
        if (e == Gate::Entry::kWaited) ++waited;
        s.gate.open(launch, std::this_thread::get_id());
      }
      const int now = ++inside;  // the launch call, outside the lock
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      --inside;
      std::lock_guard lk(s.mu);
      if (s.gate.close(launch)) s.cv.notify_all();
    }
  };
  std::random_device rd;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, rd());
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(most.load(), 1) << "two threads' launches were open at once";
  EXPECT_EQ(timed_out.load(), 0);
  EXPECT_GT(waited.load(), 0) << "the threads never met: the test proves nothing";
  EXPECT_FALSE(s.gate.openLaunch());
}

}  // namespace
}  // namespace detrace::tracer
