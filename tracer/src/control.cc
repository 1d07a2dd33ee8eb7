// The traced process's end of `detrace attach`. See control.h.
#include "control.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detrace/tracer/control_protocol.h"
#include "detrace/tracer/control_server.h"

#include "log.h"
#include "session.h"
#include "signals.h"

namespace detrace::tracer {
namespace {

constexpr auto kStopLimit = std::chrono::seconds(2);  // stopControl's wait for the server's thread

std::atomic<bool> g_tried{false};
// Heap-allocated so a forked child can replace a mutex another parent thread held at fork time.
std::mutex* g_mu = new std::mutex;
ControlServer* g_server = nullptr;  // never deleted: see stopControl()
// RUN_DIR/proc-<pid>.dtrace-control, once written (on the server's thread); leaked (exit).
std::string& g_pointer = *new std::string;
std::mutex* g_pointer_mu = new std::mutex;  // heap: replaced in a forked child, as g_mu

// The pointer file is written by a thread of its own, which says when it is done: startControl
// waits for that, but no longer than kPointerWait (a stalled run directory costs the program that,
// not more, and the control socket answers meanwhile).
constexpr auto kPointerWait = std::chrono::milliseconds(250);
struct PointerWritten {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

control::Reply statusReply() {
  Session::CaptureState st = Session::get().captureState();
  control::Reply r;
  r.set("protocol", std::to_string(control::kProtocolVersion));
  r.set("pid", std::to_string(getpid()));
  const char* state = st.capturing ? "capturing" : "paused";
  if (st.finished) state = "finished";
  if (st.failed) state = "failed";
  r.set("state", state);
  if (!st.reason.empty()) r.set("reason", st.reason);
  r.set("capture", st.level);
  if (!st.window.empty()) r.set("window", st.window);
  if (!st.trace.empty()) r.set("trace", st.trace);
  r.set("events", std::to_string(st.events));
  r.set("dropped", std::to_string(st.dropped));
  if (st.rank >= 0) r.set("rank", std::to_string(st.rank));
  if (st.world_size > 0) r.set("world_size", std::to_string(st.world_size));
  if (st.committing) r.set("committing", "1");  // a stop's commit goes on in the background
  return r;
}

// Runs on the server's thread, one request at a time.
control::Reply handle(const control::Request& request) {
  Session& s = Session::get();
  Status st;
  switch (request.verb) {
    case control::Verb::kStart:
      st = s.startCapture(request.capture, request.window);
      break;
    case control::Verb::kStop:
      st = s.stopCapture();
      break;
    case control::Verb::kStatus:
      break;
  }
  if (!st.isOk()) return control::Reply::failure(st.message());
  return statusReply();
}

// Opens `path` for writing, emptied, without following a symlink and only if the file is this
// user's (a run directory others may write to must not let them point the write elsewhere, or
// at a file of theirs hard-linked there). Not made exclusive: what is there is ours to replace.
std::FILE* openOwnFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid()) {
    ::close(fd);
    errno = EPERM;
    return nullptr;
  }
  if (S_ISREG(st.st_mode)) (void)::ftruncate(fd, 0);
  std::FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) ::close(fd);
  return f;
}

// RUN_DIR/proc-<pid>.dtrace-control names the socket (written whole, then renamed into place).
void writePointer(const std::string& socket) {
  const char* run_dir = std::getenv("DETRACE_OUT_DIR");
  if (run_dir == nullptr || *run_dir == '\0') return;
  std::string path = control::pointerPath(run_dir, getpid());
  std::string tmp = path + ".tmp";
  std::FILE* f = openOwnFile(tmp);
  if (f == nullptr) {
    logLine(
        "cannot write %s (%s); `detrace attach %d` still works, `detrace attach RUN_DIR` will "
        "not find this process",
        path.c_str(), std::strerror(errno), getpid());
    return;
  }
  bool ok = std::fprintf(f, "socket=%s\n", socket.c_str()) > 0;
  ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) {
    std::lock_guard lk(*g_pointer_mu);
    g_pointer = path;
  } else {
    std::remove(tmp.c_str());
  }
}

void stopAtExit() { stopControl(); }

Result<std::unique_ptr<ControlServer>> startServer() {
  ControlServerOptions o;
  o.pid = getpid();
  o.allowed_uid = geteuid();
  o.handler = handle;
  Status first;
  for (const std::string& dir :
       control::controlDirectories(geteuid(), std::getenv("XDG_RUNTIME_DIR"))) {
    o.dir = dir;
    auto server = ControlServer::start(o);
    if (server.isOk()) return server;
    if (first.isOk()) first = server.status();
  }
  return first;
}

// Writes the pointer file on a thread of its own (the run directory may be on a network file
// system that stalls) and waits for it kPointerWait at most.
void announce(const std::string& socket) {
  auto* written = new PointerWritten;  // leaked: the thread may still be writing at exit
  try {
    SignalsBlockedScope blocked;  // the program's signals stay with the program's threads
    std::thread([written, socket] {
      try {
        writePointer(socket);
      } catch (...) {
      }
      std::lock_guard lk(written->mu);
      written->done = true;
      written->cv.notify_all();
    }).detach();
  } catch (...) {  // no thread: write it here
    writePointer(socket);
    return;
  }
  std::unique_lock lk(written->mu);
  if (!written->cv.wait_for(lk, kPointerWait, [written] { return written->done; })) {
    logLine("the run directory is slow: `detrace attach RUN_DIR` may not find this process for a "
            "while (`detrace attach %d` works)", static_cast<int>(getpid()));
  }
}

}  // namespace

void startControl() noexcept {
  if (g_tried.load(std::memory_order_acquire)) return;
  try {
    std::lock_guard lk(*g_mu);
    if (g_tried.load(std::memory_order_relaxed)) return;
    g_tried.store(true, std::memory_order_release);
    if (const char* v = std::getenv("DETRACE_CONTROL"); v != nullptr && std::strcmp(v, "0") == 0)
      return;
    auto server = startServer();
    if (!server.isOk()) {
      logLine("`detrace attach` cannot reach this process: %s", server.status().message().c_str());
      return;
    }
    g_server = server->release();
    announce(g_server->path());
    std::atexit(stopAtExit);
    installSignalHandlers();  // a paused process killed by SIGTERM also removes its socket
  } catch (...) {
  }
}

void stopControl() noexcept {
  try {
    std::lock_guard lk(*g_mu);
    // Stopped, not deleted: the process is ending, and a handler still running on the server's
    // thread must not find its server freed.
    // Bounded: this runs at exit, and a request still being answered (a capture's stop on a
    // stalled file system) must not keep the program from ending.
    if (g_server != nullptr && !g_server->stop(kStopLimit)) {
      logLine("`detrace attach`'s last request was still being answered at exit; left to end by itself");
    }
    std::lock_guard pointer_lk(*g_pointer_mu);
    if (!g_pointer.empty()) ::unlink(g_pointer.c_str());
    g_pointer.clear();
  } catch (...) {
  }
}

void resetControlAfterFork() noexcept {
  g_mu = new std::mutex;  // the parent's may have been held by a thread that is gone here
  g_pointer_mu = new std::mutex;
  if (g_server != nullptr) g_server->abandonAfterFork();  // and leaked: its thread is the parent's
  g_server = nullptr;
  g_pointer = std::string();
  g_tried.store(false, std::memory_order_release);
}

}  // namespace detrace::tracer
