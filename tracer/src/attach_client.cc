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

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Whether process `pid` listens on the socket at `path`, by a connection closed at once (the
// server drops a client that sends nothing). A socket file left by a dead process that had the
// same pid (a crash leaves it; or the program exec'd) refuses; one of another process names that
// process. A full queue (a stopped process) or an error that the request's own connection will
// name counts as listening. Never by the file's age: a step of the wall clock moves every
// process's start time, as computed from /proc, against the files' times.
bool listensAs(const std::string& path, pid_t pid) {
  const Result<sockaddr_un> addr = control::unixAddress(path);
  if (path.empty() || !addr.isOk()) return false;
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return true;
  int rc = 0;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno != ECONNREFUSED && errno != ENOENT && errno != ENOTSOCK;
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid == pid;
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

// Whether process `pid` is a `detrace record` of this detrace: another process of this very
// executable with "record" among its arguments.
bool isDetraceRecord(pid_t pid) {
  std::error_code ec;
  if (pid == ::getpid() || !fs::equivalent(fmt::format("/proc/{}/exe", pid), "/proc/self/exe", ec) || ec) {
    return false;
  }
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) {
    if (arg == "record") return true;
  }
  return false;
}

// The directories of the socket paths looked at, each once, in order: "A, B".
std::string directoriesOf(const std::vector<std::string>& sockets) {
  std::vector<std::string> dirs;
  for (const std::string& s : sockets) {
    if (s.empty()) continue;
    std::string d = fs::path(s).parent_path().string();
    if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(std::move(d));
  }
  return dirs.empty() ? std::string("nowhere") : fmt::format("{}", fmt::join(dirs, ", "));
}

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
  if (!processRunning(pid)) {  // a zombie (exited, not yet reaped) counts as exited
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
    if (isSocket(c) && listensAs(c, pid)) return AttachTargets{{AttachTarget{pid, c}}, {}, {}, {}};
  }
  if (!env.empty() && env.count("DETRACE_OUT_DIR") == 0) {
    if (std::string run = runOfLauncher(pid); !run.empty()) return targetsOfRun(run);
    if (isDetraceRecord(pid)) {
      return makeError(ErrorCode::kNotFound,
                       "process {} is a `detrace record` with no recorded command under it: its "
                       "command has not started yet (try again in a moment), has exited, or "
                       "cleared its environment",
                       pid);
    }
    return makeError(ErrorCode::kNotFound,
                     "process {} is not recorded by detrace; start it with "
                     "`detrace record --paused -o RUN_DIR -- COMMAND` to attach to it later",
                     pid);
  }
  return makeError(ErrorCode::kNotFound,
                   "process {} has no detrace control socket that it listens on (looked in {}): "
                   "{} The socket appears at the process's first CUDA, NCCL or cuBLAS call (after "
                   "an exec, the new program's), and not at all with DETRACE_CONTROL=0",
                   pid, directoriesOf(candidates), kPausedHint);
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
    if (!processRunning(pid)) {
      t.exited.push_back(pid);
      continue;
    }
    // Its pid handed to a process that started after the pointer was written, by the times alone
    // (a step of the wall clock can fool them): decides only where the process cannot be asked.
    struct stat pointer {};
    const bool stale = ::stat(entry.path().c_str(), &pointer) == 0 &&
                       !mayHaveWritten(pid, static_cast<int64_t>(pointer.st_mtime));
    if (const int64_t uid = processUid(pid); uid >= 0 && uid != ::geteuid()) {
      if (stale) {
        t.exited.push_back(pid);
      } else {
        t.other_users.push_back({pid, uid});
      }
      continue;
    }
    // Gone (its pid now another run's process); or running, but nobody, or another process,
    // listens on the socket it named: it exec'd another program (or its pid was handed out again).
    std::string socket = socketFromPointer(entry.path().string());
    if (!isSocket(socket) || !recordsInto(pid, dir)) {
      t.exited.push_back(pid);
    } else if (!listensAs(socket, pid)) {
      (stale ? t.exited : t.not_listening).push_back(pid);
    } else {
      t.live.push_back({pid, socket});
    }
  }
  if (ec) return makeError(ErrorCode::kIo, "cannot read {}: {}", dir, ec.message());
  auto byPid = [](const AttachTarget& a, const AttachTarget& b) { return a.pid < b.pid; };
  std::sort(t.live.begin(), t.live.end(), byPid);
  std::sort(t.exited.begin(), t.exited.end());
  std::sort(t.not_listening.begin(), t.not_listening.end());
  const auto manifest = db::readManifest(dir);
  const bool ended = manifest.isOk() && manifest->end_time_ns > 0;
  // Recorded on another host (a run directory on a shared file system): its pids mean nothing here.
  if (t.live.empty() && manifest.isOk() && !ended && !manifest->host.empty() && manifest->host != hostName()) {
    return makeError(ErrorCode::kNotFound,
                     "the recording in {} was made on host {}, not on this one ({}), and has "
                     "not ended: its processes can only be reached there; run detrace attach on {}",
                     dir, manifest->host, hostName(), manifest->host);
  }
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
    if (!t.not_listening.empty()) {
      return makeError(ErrorCode::kNotFound,
                       "no process of {} listens for detrace: process(es) {} are running but do "
                       "not answer on their control sockets (they exec'd another program, whose "
                       "socket comes at its first CUDA, NCCL or cuBLAS call, or their pid is "
                       "another process's now){}",
                       dir, fmt::join(t.not_listening, ", "),
                       t.exited.empty() ? "" : fmt::format("; {} more have exited", t.exited.size()));
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
    return makeError(ErrorCode::kNotFound, "{} is not process {}'s control socket (process {} listens there){}",
                     target.socket, target.pid, cred.pid,
                     processRunning(target.pid) ? "" : "; the process has exited");
  }
  return Status::ok();
}

// Connects to the socket before the deadline; the error names the likely cause. Never blocks:
// a stopped process's queue fills up (each client that gave up stays queued), and a blocking
// connect would then wait for good.
Result<ScopedFd> connectTo(const AttachTarget& target, int64_t deadline_ms) {
  DETRACE_ASSIGN_OR_RETURN(const sockaddr_un addr, control::unixAddress(target.socket));
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
      if (!processRunning(target.pid)) {
        return makeError(ErrorCode::kNotFound, "process {} has exited (its control socket {} is gone)",
                         target.pid, target.socket);
      }
      return makeError(ErrorCode::kNotFound, "process {}: its control socket {} is gone; {}",
                       target.pid, target.socket, kPausedHint);
    case ECONNREFUSED:
      return makeError(ErrorCode::kNotFound, "process {} does not answer on {}: {}", target.pid,
                       target.socket,
                       processRunning(target.pid)
                           ? "it runs, but nothing listens there (it exec'd another program, "
                             "whose socket comes at its first CUDA, NCCL or cuBLAS call, or its "
                             "pid is another process's now)"
                           : "it has exited");
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
