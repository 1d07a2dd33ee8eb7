// A child process driven line by line: the test writes commands to its stdin and reads its answers
// from its stdout (tests/tracer/control_app.cc, attach_gpu_app.cu). Header-only, for the tracer's
// attach and signal tests.
#pragma once

#include <cerrno>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace detrace::testing {

// The next line read from `fd`; "<timeout>" appended after `timeout_ms` without one, what was read
// at EOF.
inline std::string readLine(int fd, int timeout_ms) {
  std::string l;
  char c;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return l + "<timeout>";
    if (read(fd, &c, 1) != 1) return l;
    if (c == '\n') return l;
    l += c;
  }
}

// Writes `cmd` and a newline to `to`; false if it could not. A child that is gone fails the
// write (EPIPE) instead of killing the whole test binary with SIGPIPE: the signal is blocked
// meanwhile on this thread and taken off again if the write raised it.
inline bool writeLine(int to, const std::string& cmd) {
  const std::string l = cmd + "\n";
  sigset_t pipe_only, saved;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &saved);
  const bool ok = write(to, l.data(), l.size()) == static_cast<ssize_t>(l.size());
  if (!ok && errno == EPIPE && !sigismember(&saved, SIGPIPE)) {
    const timespec now{0, 0};
    (void)sigtimedwait(&pipe_only, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return ok;
}

class LineChild {
 public:
  // Starts `program` with `args` and exactly the environment `env` ("KEY=value" each).
  LineChild(const std::string& program, const std::vector<std::string>& args,
            const std::vector<std::string>& env) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> envv = env;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      std::vector<char*> a, e;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      for (auto& s : envv) e.push_back(s.data());
      e.push_back(nullptr);
      execve(program.c_str(), a.data(), e.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~LineChild() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
  }
  LineChild(const LineChild&) = delete;
  LineChild& operator=(const LineChild&) = delete;

  pid_t pid() const { return pid_; }

  // Sends one command line and returns the answer line.
  std::string send(const std::string& cmd) { return writeLine(to_, cmd) ? line() : "<write failed>"; }
  // Sends a line and expects no answer (the child exits).
  void say(const std::string& cmd) { (void)writeLine(to_, cmd); }
  // The next line the child prints; "<timeout>" after `timeout_ms`, what was read at EOF.
  std::string line(int timeout_ms = 20000) { return readLine(from_, timeout_ms); }
  // Waits for the child to end; its wait status.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  bool reaped_ = false;
};

}  // namespace detrace::testing
