// The client side of `detrace attach`. See attach.h.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "detrace/base/scoped.h"
#include "detrace/db/run.h"
#include "detrace/tracer/attach.h"
#include "detrace/tracer/run_processes.h"

namespace fs = std::filesystem;

namespace detrace::tracer {
namespace {

inline void closeFd(int fd) { ::close(fd); }
using ScopedFd = ScopedResource<int, closeFd, -1>;

constexpr const char* kPausedHint =
    "was it recorded with `detrace record --paused` (or `detrace record`)?";

int64_t monotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1'000'000;
}

bool parsePid(const std::string& text, pid_t& pid) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  pid = static_cast<pid_t>(std::atol(text.c_str()));
  return pid > 0;
}

// The socket a pointer file (RUN_DIR/proc-<pid>.dtrace-control) names, "" if unreadable. Only a
// regular file is read: a FIFO put there would block the open for good.
std::string socketFromPointer(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("socket=", 0) == 0) return line.substr(7);
  }
  return "";
}

bool isSocket(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// False when process `pid` records into another run directory than `dir`: a pointer file left by
// a process that has exited may name a pid that a process of another run has now. Its
// DETRACE_OUT_DIR says; a process without one (or whose environment cannot be read) is not
// refused here (without a tracer it has no socket to answer on).
bool recordsInto(pid_t pid, const std::string& dir) {
  const std::map<std::string, std::string> env = processEnvironment(pid);
  auto it = env.find("DETRACE_OUT_DIR");
  if (it == env.end()) return true;
  std::error_code ec;
  return fs::equivalent(it->second, dir, ec) && !ec;
}

Result<AttachTargets> targetsOfRun(const std::string& dir);

// The run directory of a `detrace record` whose pid this is (`$!` after `detrace record --paused
// ... &`): a child of it carries DETRACE_LAUNCHER_PID with this pid. "" if none does (also in the
// moment between fork and exec, while the child's environment is still detrace's own).
std::string runOfLauncher(pid_t pid) {
  for (pid_t child : childProcesses(pid)) {
    const std::map<std::string, std::string> env = processEnvironment(child);
    auto launcher = env.find("DETRACE_LAUNCHER_PID");
    auto out = env.find("DETRACE_OUT_DIR");
    if (launcher != env.end() && out != env.end() && launcher->second == std::to_string(pid)) return out->second;
  }
  return "";
}

Result<AttachTargets> targetsOfPid(pid_t pid) {
  if (!processAlive(pid)) {
    return makeError(ErrorCode::kNotFound,
                     "no process {}: it has exited, or the pid is wrong (ps -p {})", pid, pid);
  }
  if (const int64_t uid = processUid(pid); uid >= 0 && uid != ::geteuid()) {
    return makeError(ErrorCode::kIo,
                     "process {} runs as uid {}, not as you (uid {}): only a "
                     "process's own user may control it; run detrace attach as that user",
                     pid, uid, ::geteuid());
  }
  std::map<std::string, std::string> env = processEnvironment(pid);
  std::vector<std::string> candidates;
  if (auto it = env.find("DETRACE_OUT_DIR"); it != env.end()) {
    candidates.push_back(socketFromPointer(control::pointerPath(it->second, pid)));
  }
  auto xdg = env.find("XDG_RUNTIME_DIR");
  for (const char* x : {xdg != env.end() ? xdg->second.c_str() : nullptr,
                        static_cast<const char*>(std::getenv("XDG_RUNTIME_DIR"))}) {
    for (const std::string& dir : control::controlDirectories(::geteuid(), x)) {
      candidates.push_back(control::socketPath(dir, pid));
    }
  }
  for (const std::string& c : candidates) {
    if (isSocket(c)) return AttachTargets{{AttachTarget{pid, c}}, {}, {}};
  }
  if (!env.empty() && env.count("DETRACE_OUT_DIR") == 0) {
    if (std::string run = runOfLauncher(pid); !run.empty()) return targetsOfRun(run);
    return makeError(ErrorCode::kNotFound,
                     "process {} is not recorded by detrace; start it with "
                     "`detrace record --paused -o RUN_DIR -- COMMAND` to attach to it later",
                     pid);
  }
  return makeError(ErrorCode::kNotFound,
                   "process {} has no detrace control socket (looked in {}): {} The socket "
                   "appears at the process's first CUDA, NCCL or cuBLAS call, and not at all "
                   "with DETRACE_CONTROL=0",
                   pid, control::controlDirectory(::geteuid(), std::getenv("XDG_RUNTIME_DIR")),
                   kPausedHint);
}

Result<AttachTargets> targetsOfRun(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return makeError(ErrorCode::kNotFound, "{} is neither a process id nor a run directory", dir);
  }
  AttachTargets t;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    pid_t pid = control::pidOfPointerName(entry.path().filename().string());
    if (pid <= 0) continue;
    // Gone, or its pid handed to a process that started after the pointer was written.
    struct stat pointer {};
    const bool stale = ::stat(entry.path().c_str(), &pointer) == 0 &&
                       !mayHaveWritten(pid, static_cast<int64_t>(pointer.st_mtime));
    if (!processRunning(pid) || stale) {
      t.exited.push_back(pid);
      continue;
    }
    if (const int64_t uid = processUid(pid); uid >= 0 && uid != ::geteuid()) {
      t.other_users.push_back({pid, uid});
      continue;
    }
    std::string socket = socketFromPointer(entry.path().string());
    if (!isSocket(socket) || !recordsInto(pid, dir)) {
      t.exited.push_back(pid);
    } else {
      t.live.push_back({pid, socket});
    }
  }
  if (ec) return makeError(ErrorCode::kIo, "cannot read {}: {}", dir, ec.message());
  auto byPid = [](const AttachTarget& a, const AttachTarget& b) { return a.pid < b.pid; };
  std::sort(t.live.begin(), t.live.end(), byPid);
  std::sort(t.exited.begin(), t.exited.end());
  const auto manifest = db::readManifest(dir);
  const bool ended = manifest.isOk() && manifest->end_time_ns > 0;
  if (t.live.empty() && !t.other_users.empty() && !ended) {
    const auto& [pid, uid] = t.other_users.front();
    return makeError(ErrorCode::kIo,
                     "the running processes of {} are another user's (process {} runs as uid {}, "
                     "not as you, uid {}): only a process's own user may control it; run detrace "
                     "attach as that user",
                     dir, pid, uid, ::geteuid());
  }
  if (t.live.empty()) {
    if (ended) {
      return makeError(ErrorCode::kNotFound,
                       "the recording in {} has ended (its command exited with "
                       "status {}); nothing to attach to",
                       dir, manifest->exit_code);
    }
    if (!t.exited.empty()) {
      return makeError(ErrorCode::kNotFound,
                       "every process of {} has exited ({} of them); nothing "
                       "to attach to",
                       dir, t.exited.size());
    }
    // Unfinished, and the `detrace record` that made it is gone (killed): the run is over.
    if (manifest.isOk() && manifest->launcher_pid > 0 &&
        liveProcessesOfRun(dir).empty()) {
      return makeError(ErrorCode::kNotFound,
                       "the recording in {} is over: its `detrace record` (process {}) is gone "
                       "without finishing the run (killed?), and no process of it runs; nothing "
                       "to attach to",
                       dir, manifest->launcher_pid);
    }
    return makeError(ErrorCode::kNotFound,
                     "no running process of {} can be controlled: {} Its processes make their "
                     "control socket at their first CUDA, NCCL or cuBLAS call",
                     dir, kPausedHint);
  }
  return t;
}

// The process at the other end of a connected socket is `target.pid` (a pointer file may name
// any socket).
Status checkServer(int fd, const AttachTarget& target) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return makeError(ErrorCode::kIo, "process {}: cannot identify the process behind {}: {}",
                     target.pid, target.socket, std::strerror(errno));
  }
  if (cred.pid != target.pid) {
    return makeError(ErrorCode::kNotFound,
                     "{} is not process {}'s control socket (process {} listens there); the "
                     "process has exited",
                     target.socket, target.pid, cred.pid);
  }
  return Status::ok();
}

// Connects to the socket before the deadline; the error names the likely cause. Never blocks:
// a stopped process's queue fills up (each client that gave up stays queued), and a blocking
// connect would then wait for good.
Result<ScopedFd> connectTo(const AttachTarget& target, int64_t deadline_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (target.socket.size() >= sizeof addr.sun_path) {
    return makeError(ErrorCode::kInvalidArgument, "socket path too long: {}", target.socket);
  }
  std::memcpy(addr.sun_path, target.socket.c_str(), target.socket.size() + 1);
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return makeError(ErrorCode::kIo, "socket: {}", std::strerror(errno));
  int err = 0;
  for (;;) {
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      DETRACE_RETURN_IF_ERROR(checkServer(fd.get(), target));
      return fd;
    }
    err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN) break;
    if (monotonicMs() >= deadline_ms) {
      return makeError(ErrorCode::kUnavailable,
                       "process {} takes no connections (its queue is full): it may be stopped "
                       "(SIGSTOP, a debugger) or busy; try again once it runs",
                       target.pid);
    }
    ::usleep(20'000);
  }
  switch (err) {
    case ENOENT:
      return makeError(ErrorCode::kNotFound, "process {}: its control socket {} is gone; {}",
                       target.pid, target.socket, kPausedHint);
    case ECONNREFUSED:
      return makeError(ErrorCode::kNotFound,
                       "process {} does not answer on {}: it has exited or "
                       "finished recording",
                       target.pid, target.socket);
    case EACCES:
    case EPERM:
      return makeError(ErrorCode::kIo,
                       "process {}: permission denied on {}: it belongs to another "
                       "user; run detrace attach as that user",
                       target.pid, target.socket);
    default:
      return makeError(ErrorCode::kIo, "process {}: cannot connect to {}: {}", target.pid,
                       target.socket, std::strerror(err));
  }
}

}  // namespace

Result<AttachTargets> findAttachTargets(const std::string& pid_or_run_dir) {
  pid_t pid = 0;
  // A run directory named by digits (`record -o 20241206`) is a run, not a pid: `record` wrote
  // its manifest before starting the command (one damaged since still says so).
  std::error_code ec;
  const bool run = fs::exists(fs::path(pid_or_run_dir) / db::kManifestName, ec);
  if (parsePid(pid_or_run_dir, pid) && !run) return targetsOfPid(pid);
  return targetsOfRun(pid_or_run_dir);
}

Result<control::Reply> sendControlRequest(const AttachTarget& target,
                                          const control::Request& request, int timeout_ms) {
  const int64_t deadline = monotonicMs() + timeout_ms;
  DETRACE_ASSIGN_OR_RETURN(ScopedFd fd, connectTo(target, deadline));
  std::string line = control::formatRequest(request);
  if (::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(line.size())) {
    return makeError(ErrorCode::kIo, "process {}: cannot send the request: {}", target.pid,
                     std::strerror(errno));
  }
  std::string reply;
  char buf[1024];
  while (reply.find('\n') == std::string::npos && reply.size() <= control::kMaxLineBytes) {
    int64_t left = deadline - monotonicMs();
    if (left <= 0) {
      return makeError(ErrorCode::kUnavailable,
                       "process {} did not answer within {} s; it may be "
                       "stopped (SIGSTOP) or overloaded",
                       target.pid, timeout_ms / 1000);
    }
    pollfd p{fd.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return makeError(ErrorCode::kIo, "poll: {}", std::strerror(errno));
    if (r == 0) continue;
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  if (reply.empty()) {
    return makeError(ErrorCode::kIo, "process {} closed the connection without answering",
                     target.pid);
  }
  DETRACE_ASSIGN_OR_RETURN(control::Reply r,
                           control::parseReply(reply.substr(0, reply.find('\n'))));
  if (r.ok && !r.get("protocol").empty() &&
      r.get("protocol") != std::to_string(control::kProtocolVersion)) {
    return makeError(ErrorCode::kVersionMismatch,
                     "process {} speaks control protocol {}, this "
                     "detrace speaks {}; use the detrace that recorded it",
                     target.pid, r.get("protocol"), control::kProtocolVersion);
  }
  return r;
}

}  // namespace detrace::tracer
