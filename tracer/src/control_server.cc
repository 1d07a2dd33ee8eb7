// ControlServer: the socket end of `detrace attach`. See control_server.h.
#include "detrace/tracer/control_server.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "detrace/base/held_fd.h"
#include "detrace/base/scoped.h"

#include "log.h"

namespace detrace::tracer {
namespace {

inline void closeFd(int fd) { ::close(fd); }
using ScopedFd = ScopedResource<int, closeFd, -1>;

int64_t monotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1'000'000;
}

constexpr int kPollMs = 1000;
constexpr int kPollMsWithoutWake = 100;  // once the program took the wake pipe

// True if a live server answers at `path` (a socket file left by a dead process does not). Never
// waits: this runs on the program's thread, and a listener whose queue is full (a stopped process,
// or one filling it on purpose) would hold a blocking connect for good. A full queue means that
// someone listens.
bool someoneListens(const sockaddr_un& addr) {
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return false;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return true;
  return errno == EAGAIN || errno == EINPROGRESS;
}

// Sends all of `data` while `client` is still the connection it was (the program may have closed
// its number and put a socket of its own there); never raises SIGPIPE.
void sendAll(const HeldFd& client, const std::string& data) {
  size_t off = 0;
  while (off < data.size() && client.intact()) {
    ssize_t n = ::send(client.get(), data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

class ControlServer::Impl {
 public:
  ControlServerOptions opts;
  std::string path;
  // Held (held_fd.h): the program may close them, or open its own sockets on their numbers.
  HeldFd listen_fd;
  HeldFd wake_rd, wake_wr;  // stop() writes a byte to end the thread's poll
  std::thread thread;
  std::atomic<bool> stopped{false};
  // False once the wake pipe hung up without a stop (the program closed or dup2'd onto its write
  // end): the thread then serves on, seeing a stop by its poll's timeout. The thread's alone.
  bool wake_usable = true;
  std::mutex exit_mu;  // the thread's end, for a bounded stop()
  std::condition_variable exit_cv;
  bool exited = false;

  void markExited() {
    std::lock_guard lk(exit_mu);
    exited = true;
    exit_cv.notify_all();
  }
  bool awaitExit(std::chrono::milliseconds limit) {
    std::unique_lock lk(exit_mu);
    return exit_cv.wait_for(lk, limit, [this] { return exited; });
  }

  void log(const std::string& line) const {
    if (opts.log) {
      opts.log(line);
    } else {
      logLine("%s", line.c_str());
    }
  }

  Status bindSocket() {
    DETRACE_ASSIGN_OR_RETURN(sockaddr_un addr, control::unixAddress(path));
    // Non-blocking: a connection gone between poll and accept4 must not leave the thread in accept.
    listen_fd = HeldFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listen_fd) return makeError(ErrorCode::kIo, "socket: {}", std::strerror(errno));
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode) || someoneListens(addr)) {
        return makeError(ErrorCode::kIo, "{} is already in use", path);
      }
      ::unlink(path.c_str());  // left by a dead process that had our pid
    }
    if (::bind(listen_fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      return makeError(ErrorCode::kIo, "cannot bind {}: {}", path, std::strerror(errno));
    }
    // The directory is already 0700; the socket itself is made 0600 before anyone may connect.
    // By path, and safely so: only this uid can change entries in the directory
    // (ensurePrivateDirectory), and no other user can move the directory itself, its parent
    // being this uid's or root's and sticky if others may write it (runtimeDirectoryUsable).
    if (::chmod(path.c_str(), 0600) != 0 || ::listen(listen_fd.get(), 4) != 0) {
      Status st2 = makeError(ErrorCode::kIo, "cannot set up {}: {}", path, std::strerror(errno));
      ::unlink(path.c_str());
      return st2;
    }
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::unlink(path.c_str());
      return makeError(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
    }
    wake_rd = HeldFd(fds[0]);
    wake_wr = HeldFd(fds[1]);
    return Status::ok();
  }

  enum class Read { kLine, kTooLong, kNone };
  // Reads one line (up to kMaxLineBytes) before the deadline; kNone on timeout, EOF, error, or a
  // stop (the wake pipe: the process is ending, and a silent client must not hold its exit up).
  Read readLine(const HeldFd& client, std::string& line) {
    const int fd = client.get();
    int64_t deadline = monotonicMs() + opts.read_timeout_ms;
    char buf[512];
    while (line.find('\n') == std::string::npos) {
      if (line.size() > control::kMaxLineBytes) return Read::kTooLong;
      if (!client.intact() || stopped.load(std::memory_order_acquire)) return Read::kNone;
      int64_t left = deadline - monotonicMs();
      if (left <= 0) return Read::kNone;
      pollfd p[2] = {{fd, POLLIN, 0}, {wake_rd.get(), POLLIN, 0}};
      const nfds_t polled = wakePollCount();
      int r = ::poll(p, polled, static_cast<int>(std::min<int64_t>(left, pollMs(polled))));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Read::kNone;
      if (polled == 2 && p[1].revents != 0) {
        if (stopped.load(std::memory_order_acquire)) return Read::kNone;
        wakePipeHungUp();
        continue;
      }
      if (r == 0 || (p[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return line.empty() ? Read::kNone : Read::kLine;  // a last line without its newline counts
      line.append(buf, static_cast<size_t>(n));
    }
    line.resize(line.find('\n'));
    return Read::kLine;
  }

  // The wake pipe's place in a poll: 2 while it can wake the thread, else 1 (left out).
  nfds_t wakePollCount() const { return wake_usable && wake_rd.intact() ? 2 : 1; }
  // How long a poll of `polled` descriptors waits at most: without the wake pipe, a stop is seen
  // only when it returns.
  static int pollMs(nfds_t polled) { return polled == 2 ? kPollMs : kPollMsWithoutWake; }

  // Called when the wake pipe's read end reports something: a stop, or its write end gone (the
  // program closed its number or put a file of its own there). Then the thread stops polling it,
  // says so once, and serves on; stop() is seen within kPollMsWithoutWake.
  void wakePipeHungUp() {
    if (!wake_usable) return;
    wake_usable = false;
    log("the program closed the control thread's wake pipe; `detrace attach` still works");
  }

  // True once the client has hung up (it gave up waiting, e.g. while this process was stopped):
  // its request is then not carried out, since nobody would learn that it was. Only a full close
  // (POLLHUP): a client that shut down its writing side after its request (POLLRDHUP: socat,
  // `nc -N`, a script's shutdown(SHUT_WR)) still reads the reply.
  static bool clientGone(int fd) {
    pollfd p{fd, 0, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0;
  }

  void serve(const HeldFd& client) {
    const int fd = client.get();
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      log(std::string("control socket: cannot identify a client (SO_PEERCRED: ") +
          std::strerror(errno) + "); refused");
      return;
    }
    control::PeerDecision d = control::checkPeer(cred.uid, cred.pid, opts.allowed_uid);
    if (!d.allowed) {
      log("refused a control connection: " + d.reason);
      sendAll(client, control::formatReply(control::Reply::failure("permission denied: " + d.reason)));
      return;
    }
    std::string line;
    const Read read = readLine(client, line);
    if (read == Read::kTooLong) {
      sendAll(client, control::formatReply(control::Reply::failure(
                          "request too long (more than " + std::to_string(control::kMaxLineBytes) +
                          " bytes); shorten its arguments (--window)")));
      return;
    }
    if (read != Read::kLine || stopped.load(std::memory_order_acquire) || clientGone(fd)) return;
    control::Reply reply;
    auto request = control::parseRequest(line);
    if (!request.isOk()) {
      reply = control::Reply::failure(request.status().message());
    } else {
      try {
        reply = opts.handler ? opts.handler(*request) : control::Reply::failure("no handler");
      } catch (const std::exception& e) {
        reply = control::Reply::failure(std::string("internal error: ") + e.what());
      } catch (...) {
        reply = control::Reply::failure("internal error");
      }
    }
    sendAll(client, control::formatReply(reply));
  }

  // False, once said, if the program closed the socket or the wake pipe (their numbers may name
  // its own files now, which the thread must never accept on or read). The socket's file goes
  // too, so that clients are told at once that nobody listens instead of waiting.
  bool descriptorsIntact() const {
    if (listen_fd.intact() && wake_rd.intact()) return true;
    ::unlink(path.c_str());
    log("the program closed the control socket's descriptors; `detrace attach` can no longer "
        "reach this process (the recording goes on)");
    return false;
  }

  void loop() {
    // The host's signals must go to the host's own threads, never to this one.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    while (!stopped.load(std::memory_order_acquire)) {
      if (!descriptorsIntact()) return;
      pollfd p[2] = {{listen_fd.get(), POLLIN, 0}, {wake_rd.get(), POLLIN, 0}};
      // A second at most (pollMs): the thread looks at `stopped` and its descriptors again even
      // when the program closed the wake pipe, so stop() always ends it.
      const nfds_t polled = wakePollCount();
      int r = ::poll(p, polled, pollMs(polled));
      if (r < 0) {
        if (errno == EINTR) continue;
        log(std::string("control socket stopped: poll: ") + std::strerror(errno));
        return;
      }
      if (stopped.load(std::memory_order_acquire) || !descriptorsIntact()) return;
      if (r == 0) continue;
      if (polled == 2 && p[1].revents != 0) {
        wakePipeHungUp();  // not a stop (checked above)
        continue;
      }
      if ((p[0].revents & POLLIN) == 0) continue;
      // Held too: a request may take seconds (a stop commits), and the program may close and
      // reuse the number meanwhile.
      HeldFd client(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!client) {
        // Out of descriptors (the host is at its limit): the connection stays pending and poll
        // would report it again at once; back off instead of spinning.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) ::usleep(100'000);
        continue;
      }
      try {
        serve(client);
      } catch (...) {
      }
    }
  }
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlServer::~ControlServer() { stop(); }

const std::string& ControlServer::path() const { return impl_->path; }

Result<std::unique_ptr<ControlServer>> ControlServer::start(ControlServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  DETRACE_RETURN_IF_ERROR(control::ensurePrivateDirectory(impl->opts.dir, ::geteuid()));
  impl->path = control::socketPath(impl->opts.dir, impl->opts.pid);
  DETRACE_RETURN_IF_ERROR(impl->bindSocket());
  Impl* raw = impl.get();
  try {
    // Made with every signal blocked, so that it starts with them blocked: a signal for the
    // program must not land on it before loop() blocks them (it would run the program's handler
    // on the tracer's thread).
    struct AllSignalsBlocked {
      sigset_t saved;
      AllSignalsBlocked() {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
      }
      ~AllSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved, nullptr); }
    } blocked;
    impl->thread = std::thread([raw] {
      try {
        raw->loop();
      } catch (...) {  // out of memory in a log line: the socket stops, the program goes on
      }
      raw->markExited();
    });
  } catch (const std::exception& e) {
    ::unlink(impl->path.c_str());
    return makeError(ErrorCode::kInternal, "cannot start the control thread: {}", e.what());
  }
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

void ControlServer::stop() { (void)stop(std::chrono::milliseconds::max()); }

bool ControlServer::stop(std::chrono::milliseconds limit) {
  if (!impl_ || impl_->stopped.exchange(true)) return true;
  if (impl_->wake_wr.intact()) {
    char b = 1;
    ssize_t ignored = ::write(impl_->wake_wr.get(), &b, 1);
    (void)ignored;
  }
  ::unlink(impl_->path.c_str());  // no new client finds it, whatever the thread is doing
  if (impl_->thread.joinable()) {
    if (impl_->thread.get_id() == std::this_thread::get_id()) {
      impl_->thread.detach();  // stopped from its own handler: the loop ends by itself
      return true;
    }
    if (limit != std::chrono::milliseconds::max() && !impl_->awaitExit(limit)) {
      // A request still being answered (a stalled file system under a capture's stop): leave
      // the thread, and everything it uses, to end by itself.
      impl_->thread.detach();
      return false;
    }
    impl_->thread.join();
  }
  impl_->listen_fd.reset();
  return true;
}

void ControlServer::abandonAfterFork() {
  if (!impl_) return;
  impl_->stopped = true;
  impl_->listen_fd.reset();
  impl_->wake_rd.reset();
  impl_->wake_wr.reset();
}

}  // namespace detrace::tracer
