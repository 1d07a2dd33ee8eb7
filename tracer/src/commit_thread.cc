#include "commit_thread.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "detrace/tracer/reorder_buffer.h"
#include "log.h"
#include "session.h"
#include "signals.h"

namespace detrace::tracer {
namespace {

constexpr auto kPeriod = std::chrono::milliseconds(100);  // as CUPTI's flusher
constexpr auto kStopWait = std::chrono::seconds(1);       // at finish, for the thread to end

// One per process; a forked child leaks its parent's (its mutex may have been held at the fork).
struct CommitThread {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool done = false;  // the loop returned
  std::thread thread;
};
std::atomic<CommitThread*> g_commit{nullptr};  // leaked at stop and in a forked child
std::atomic<bool> g_cupti_flusher{false};

constexpr uint64_t kPublishEvery = 10;  // commits between publications of the counters (1 s)

void commitOnce(uint64_t round) {
  Session& s = Session::get();
  if (ReorderBuffer* rb = s.startedBuffer()) rb->poll(s.now());
  s.failIfWriterFailed();
  if (round % kPublishEvery == 0) s.publishStats();
}

void loopUntilStopped(CommitThread* c) {
  std::unique_lock lk(c->mu);
  for (uint64_t round = 1; !c->stop; ++round) {
    c->cv.wait_for(lk, kPeriod, [c] { return c->stop; });
    if (c->stop || g_cupti_flusher.load(std::memory_order_acquire)) return;
    lk.unlock();
    try {  // the thread is the tracer's, but an exception leaving it would end the program
      commitOnce(round);
    } catch (...) {
      Session::get().fail("in the tracer's commit thread");
    }
    lk.lock();
  }
}

void loop(CommitThread* c) {
  loopUntilStopped(c);
  std::lock_guard lk(c->mu);
  c->done = true;
  c->cv.notify_all();
}

}  // namespace

// Starts come from Session::startLocked (under the session's lock, once per process); a stop from
// finish, before the file is closed.
void startCommitThread() noexcept {
  try {
    if (g_commit.load(std::memory_order_acquire) != nullptr || g_cupti_flusher.load(std::memory_order_acquire)) {
      return;
    }
    auto* c = new CommitThread();
    {
      SignalsBlockedScope blocked;  // the program's signals stay with the program's threads
      c->thread = std::thread(loop, c);
    }
    g_commit.store(c, std::memory_order_release);
  } catch (...) {
    logLine("cannot start the commit thread; the trace is committed at exit and at signals only");
  }
}

void stopCommitThread() noexcept {
  try {
    CommitThread* c = g_commit.exchange(nullptr, std::memory_order_acq_rel);
    if (c == nullptr) return;
    bool done = false;
    {
      std::unique_lock m(c->mu);
      c->stop = true;
      c->cv.notify_all();
      // A commit takes milliseconds; one that takes longer (a stalled disk) is not waited for:
      // the thread is then left to end by itself (what it writes to a closed writer is dropped).
      done = c->cv.wait_for(m, kStopWait, [c] { return c->done; });
    }
    if (!c->thread.joinable() || c->thread.get_id() == std::this_thread::get_id()) return;
    if (done) {
      c->thread.join();
    } else {
      c->thread.detach();
    }
    // `c` is leaked (small): cuptiFlusherStarted, or the detached thread, may still use it.
  } catch (...) {
  }
}

void cuptiFlusherStarted() noexcept {
  g_cupti_flusher.store(true, std::memory_order_release);
  if (CommitThread* c = g_commit.load(std::memory_order_acquire)) c->cv.notify_all();
}

bool cuptiFlusherRuns() noexcept { return g_cupti_flusher.load(std::memory_order_acquire); }

void resetCommitThreadAfterFork() noexcept {
  g_commit.store(nullptr, std::memory_order_relaxed);  // the parent's: its mutex may be held
  g_cupti_flusher.store(false, std::memory_order_relaxed);
}

}  // namespace detrace::tracer
