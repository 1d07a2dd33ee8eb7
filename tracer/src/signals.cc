// Committing the trace on SIGTERM, SIGINT and SIGHUP. See signals.h for the design.
//
// Everything the handler touches is async-signal-safe: lock-free atomics, getpid, fstat, send,
// sigaction, raise and the program's own handler.
#include "signals.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "detrace/base/held_fd.h"
#include "log.h"
#include "next_symbol.h"
#include "session.h"

namespace detrace::tracer {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr size_t kCount = std::size(kSignals);
constexpr int kCommitOnly = 0x100;  // or'ed into the signal number sent to the thread
constexpr auto kFinishTimeout = std::chrono::seconds(5);

struct sigaction g_old[kCount];  // the program's actions, saved at install
std::atomic<int> g_handler_fd{-1};  // the thread's socket (the handler's end)
std::atomic<uint64_t> g_handler_dev{0}, g_handler_ino{0};  // what g_handler_fd names (set before it)
std::atomic<pid_t> g_owner{0};   // the process whose thread reads that socket
std::atomic<bool> g_reading{false};  // that thread still reads (it ends when its end is taken)
std::atomic<int> g_reader_fd{-1};    // the thread's end, for a forked child to close
std::atomic<uint64_t> g_reader_dev{0}, g_reader_ino{0};
// When the first terminating signal came (CLOCK_MONOTONIC ns; 0: none yet), which, and whether
// the process's parent sent it. A process-group kill (timeout(1), systemd, Slurm, kill -TERM
// -PGID) reaches a command of `detrace record` directly and again through detrace's forwarding
// (detrace is its parent), milliseconds apart: that copy is not the "second signal" that kills at
// once. Two from the terminal (a double Ctrl-C) or two kills from elsewhere still are.
std::atomic<int64_t> g_terminating_since_ns{0};
std::atomic<int> g_terminating_sig{0};
std::atomic<bool> g_terminating_from_parent{false};
constexpr int64_t kCopyWithinNs = 1'000'000'000;

bool fromParent(const siginfo_t* info) {  // getppid is async-signal-safe
  return info != nullptr && info->si_code == SI_USER && info->si_pid == getppid();
}

int64_t monotonicNs() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
// When each signal last came from elsewhere than `detrace record` (CLOCK_MONOTONIC ns; 0: never).
// The copy detrace forwards within kCopyWithinNs of it is that same signal again: it reaches
// neither the program's handler nor the default action (see onSignal). g_launcher: detrace's pid
// (DETRACE_LAUNCHER_PID, read at install; 0: not started by `detrace record`). Other parents that
// pass signals on (torchrun's agent to its workers) are not detrace: their copies are delivered,
// as they would be without the tracer.
std::atomic<int64_t> g_direct_ns[kCount];
std::atomic<pid_t> g_launcher{0};
std::atomic<bool> g_oneshot_used[kCount];  // a one-shot (SA_RESETHAND) program handler has run
std::atomic<bool> g_abandoned{false};      // finishBounded gave up waiting
std::mutex* g_mu = new std::mutex;  // heap: replaced in a forked child
bool g_installed = false;

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

int indexOf(int sig) {
  for (size_t i = 0; i < kCount; ++i) {
    if (kSignals[i] == sig) return static_cast<int>(i);
  }
  return -1;
}

bool isDefault(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) == 0 && a.sa_handler == SIG_DFL;
}

// Async-signal-safe: let the signal take its default action (terminate) once this handler
// returns (the signal is blocked while its handler runs) or, on the flush thread, at once.
void dieBySignal(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  raise(sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
}

FdIdentity handlerEnd() {
  return FdIdentity{g_handler_dev.load(std::memory_order_relaxed), g_handler_ino.load(std::memory_order_relaxed)};
}

// False when there is no thread to tell: none in this process, the program closed our end (its
// number may name the program's own file now), or the thread's end is gone (EPIPE).
bool notifyThread(int value) {
  int fd = g_handler_fd.load(std::memory_order_acquire);
  if (fd < 0 || g_owner.load(std::memory_order_acquire) != getpid()) return false;
  if (!g_reading.load(std::memory_order_acquire) || !fdNames(fd, handlerEnd())) return false;
  return send(fd, &value, sizeof value, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof value);
}

void onSignal(int sig, siginfo_t* info, void* context) {
  int saved_errno = errno;
  int i = indexOf(sig);
  if (i < 0) return;
  const struct sigaction& old = g_old[i];  // never changed after install: a handler may run on
                                           // several threads at once
  // A process-group kill reaches the command of `detrace record` directly and again through
  // detrace, which forwards what it gets; a signal still pending takes no second copy, so the
  // direct one always comes first. The copy is dropped: a program handling the signal
  // itself (an engine's graceful shutdown, Python's KeyboardInterrupt) sees it once, and a
  // one-shot handler's next signal is not this copy.
  const int64_t now = monotonicNs();
  const pid_t launcher = g_launcher.load(std::memory_order_relaxed);
  const bool from_launcher =
      launcher > 0 && info != nullptr && info->si_code == SI_USER && info->si_pid == launcher;
  if (!from_launcher) {
    g_direct_ns[i].store(now);
  } else if (const int64_t direct = g_direct_ns[i].load(); direct != 0 && now - direct < kCopyWithinNs) {
    errno = saved_errno;
    return;
  }
  // A one-shot handler of the program (SA_RESETHAND) runs once; from then on the signal takes
  // its default action, as it would have without the tracer (ours then finishes the trace first).
  // The kernel resets such a disposition atomically at delivery; exchange does it here.
  const bool reset = (old.sa_flags & SA_RESETHAND) != 0 && g_oneshot_used[i].exchange(true);
  if (reset || isDefault(old)) {
    // The program would die now. Let the flush thread finish the trace first; a second signal
    // (not the copy of the first that `detrace record` forwards after a process-group kill), or
    // no thread to do it (a forked child), and it dies at once.
    const bool from_parent = fromParent(info);
    int64_t first = 0;
    if (g_terminating_since_ns.compare_exchange_strong(first, now)) {
      g_terminating_sig.store(sig);
      g_terminating_from_parent.store(from_parent);
      if (!notifyThread(sig)) dieBySignal(sig);
    } else if (now - first >= kCopyWithinNs || g_terminating_sig.load() != sig ||
               g_terminating_from_parent.load() == from_parent) {
      dieBySignal(sig);
    }  // else: the forwarded copy of the first signal, not a second one
  } else if (old.sa_handler != SIG_IGN || (old.sa_flags & SA_SIGINFO) != 0) {
    // The program's own handler decides what happens; commit what we have meanwhile.
    notifyThread(sig | kCommitOnly);
    if ((old.sa_flags & SA_SIGINFO) != 0) {
      old.sa_sigaction(sig, info, context);
    } else {
      old.sa_handler(sig);
    }
  }
  errno = saved_errno;
}

}  // namespace

bool finishAbandoned() noexcept { return g_abandoned.load(std::memory_order_acquire); }

void finishBounded(std::chrono::seconds limit, const char* when) noexcept {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  // Half the bound for the GPU's work, the rest for committing what the tracer holds.
  const auto gpu_deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(limit) / 2;
  std::shared_ptr<Shared> shared;
  std::thread worker;
  // The worker finishes with the caller's CUDA context current, as the caller would (the final
  // flush waits for that context's work).
  using GetCtx = CUresult (*)(CUcontext*);
  using SetCtx = CUresult (*)(CUcontext);
  static const auto get_ctx = reinterpret_cast<GetCtx>(loadedSymbol("cuCtxGetCurrent", "libcuda.so"));
  static const auto set_ctx = reinterpret_cast<SetCtx>(loadedSymbol("cuCtxSetCurrent", "libcuda.so"));
  CUcontext ctx = nullptr;
  if (get_ctx == nullptr || set_ctx == nullptr || get_ctx(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  try {
    shared = std::make_shared<Shared>();
    SignalsBlockedScope blocked;  // the program's signals stay with the program's threads
    worker = std::thread([shared, ctx, gpu_deadline] {
      if (ctx != nullptr) (void)set_ctx(ctx);
      try {
        Session::get().finish(gpu_deadline);
      } catch (...) {
      }
      std::lock_guard lk(shared->mu);
      shared->done = true;
      shared->cv.notify_all();
    });
  } catch (...) {
    // No thread to bound it with (out of memory or threads): finish here, unbounded.
    try {
      Session::get().finish(gpu_deadline);
    } catch (...) {
    }
    return;
  }
  try {
    std::unique_lock lk(shared->mu);
    if (shared->cv.wait_for(lk, limit, [&] { return shared->done; })) {
      lk.unlock();
      worker.join();
      return;
    }
  } catch (...) {
  }
  g_abandoned.store(true, std::memory_order_release);
  logLine("the trace was not finished within %lld s of the %s; ending the program anyway (what "
          "was committed before stays in the file)",
          static_cast<long long>(limit.count()), when);
  worker.detach();
}

namespace {

void flushLoop(int rd, FdIdentity rd_id) {
  struct Ended {  // from then on the handler acts as if there were no thread
    ~Ended() { g_reading.store(false, std::memory_order_release); }
  } ended;
  for (;;) {
    // The program may have closed our end and opened a file of its own on the number: never read
    // the program's data. Ending closes nothing.
    if (!fdNames(rd, rd_id)) return;
    int value = 0;
    ssize_t n = read(rd, &value, sizeof value);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof value)) return;
    if ((value & kCommitOnly) != 0) {
      Session::get().commit(Session::Held::kKeep);  // the program goes on, and so does the recording
      continue;
    }
    int sig = value & 0xff;
    finishBounded(kFinishTimeout, "signal");
    dieBySignal(sig);
    return;  // not reached: the default action of sig terminates the process
  }
}

// A socket pair and the thread that reads one end (created with every signal blocked). The
// handler's sends are non-blocking (MSG_DONTWAIT): it never waits on a full socket.
bool armThread() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  fds[0] = moveFdHigh(fds[0]);
  fds[1] = moveFdHigh(fds[1]);
  std::optional<FdIdentity> rd_id = fdIdentity(fds[0]), wr_id = fdIdentity(fds[1]);
  bool ok = rd_id && wr_id;
  try {
    SignalsBlockedScope blocked;
    if (ok) {
      g_reading.store(true, std::memory_order_release);
      std::thread(flushLoop, fds[0], *rd_id).detach();
    }
  } catch (...) {
    g_reading.store(false, std::memory_order_release);
    ok = false;
  }
  if (!ok) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  g_owner.store(getpid(), std::memory_order_release);
  g_reader_dev.store(rd_id->dev, std::memory_order_relaxed);
  g_reader_ino.store(rd_id->ino, std::memory_order_relaxed);
  g_reader_fd.store(fds[0], std::memory_order_release);
  g_handler_dev.store(wr_id->dev, std::memory_order_relaxed);
  g_handler_ino.store(wr_id->ino, std::memory_order_relaxed);
  g_handler_fd.store(fds[1], std::memory_order_release);
  return true;
}

bool isIgnored(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) == 0 && a.sa_handler == SIG_IGN;
}

// The same handler with the same flags. Only the flags a program chooses are compared: the C
// library adds its own (SA_RESTORER on x86-64) to every action it installs, so an action read back
// differs from the one given in those.
bool sameAction(const struct sigaction& a, const struct sigaction& b) {
  constexpr int kChosen = SA_SIGINFO | SA_ONSTACK | SA_RESTART | SA_NODEFER | SA_RESETHAND |
                          SA_NOCLDSTOP | SA_NOCLDWAIT;
  const bool info = (a.sa_flags & SA_SIGINFO) != 0;
  if ((a.sa_flags & kChosen) != (b.sa_flags & kChosen)) return false;
  return info ? a.sa_sigaction == b.sa_sigaction : a.sa_handler == b.sa_handler;
}

// Ours in front of `old`, the program's action.
struct sigaction wrapping(const struct sigaction& old) {
  struct sigaction sa {};
  sa.sa_sigaction = onSignal;
  sa.sa_mask = old.sa_mask;
  // Keep the program's restart semantics (an interpreter may rely on EINTR to see its signal).
  sa.sa_flags = SA_SIGINFO | (old.sa_flags & SA_ONSTACK);  // the program's stack choice
  sa.sa_flags |= isDefault(old) ? SA_RESTART : (old.sa_flags & (SA_RESTART | SA_NODEFER));
  return sa;
}

// Installs ours in front of the program's action for signal i. The action it replaced is what
// the swap itself returns: a program thread that set its own between the read and the swap is
// chained to (or, if it chose to ignore the signal, given that back), never lost. Each swap is
// checked against what should be there: the program's action read first, then our own last one.
void installHandler(size_t i) {
  struct sigaction old {};
  if (sigaction(kSignals[i], nullptr, &old) != 0) return;
  struct sigaction expected = old;
  bool ours_installed = false;
  for (int tries = 0; tries < 4; ++tries) {
    if (isIgnored(old)) {  // the program ignores it: nothing to commit for
      if (ours_installed) (void)sigaction(kSignals[i], &old, nullptr);
      return;
    }
    g_old[i] = old;
    const struct sigaction sa = wrapping(old);
    struct sigaction replaced {};
    if (sigaction(kSignals[i], &sa, &replaced) != 0) return;
    ours_installed = true;
    if (sameAction(replaced, expected)) return;
    old = replaced;  // the program's, set in between: chain to it instead
    expected = sa;
  }
}

void installHandlers() {
  for (size_t i = 0; i < kCount; ++i) installHandler(i);
}

}  // namespace

void installSignalHandlers() noexcept {
  try {
    std::lock_guard lk(*g_mu);
    if (g_owner.load() == getpid()) return;
    if (!armThread()) {
      logLine(
          "cannot commit the trace on SIGTERM/SIGINT (no flush thread); a signal may lose the "
          "last ~100 ms of events");
      return;
    }
    if (!g_installed) {  // once per address space: a forked child keeps the saved actions
      if (const char* v = std::getenv("DETRACE_LAUNCHER_PID"); v != nullptr) {
        g_launcher.store(static_cast<pid_t>(std::strtol(v, nullptr, 10)));
      }
      installHandlers();
      g_installed = true;
    }
  } catch (...) {
  }
}

void resetSignalsAfterFork() noexcept {
  g_mu = new std::mutex;  // the parent's may have been held by a thread that is gone here
  int fd = g_handler_fd.exchange(-1);
  // The parent's socket pair: a signal in the child must never reach it, and the child must not
  // keep it alive. Each end closed only if still ours.
  if (fd >= 0 && fdNames(fd, handlerEnd())) close(fd);
  const int rd = g_reader_fd.exchange(-1);
  const FdIdentity rd_id{g_reader_dev.load(std::memory_order_relaxed), g_reader_ino.load(std::memory_order_relaxed)};
  if (rd >= 0 && fdNames(rd, rd_id)) close(rd);
  g_reading.store(false, std::memory_order_release);
  g_owner.store(0);
  g_terminating_since_ns.store(0);
  g_terminating_sig.store(0);
  g_terminating_from_parent.store(false);
  for (auto& t : g_direct_ns) t.store(0);  // the parent's signals; the child's parent is another
  g_abandoned.store(false);  // the parent's finish, not this process's
}

}  // namespace detrace::tracer
