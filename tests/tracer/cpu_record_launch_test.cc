// `detrace record` as a launcher, end to end without a GPU: what the command inherits from
// detrace (the signals detrace was started ignoring, one entry per environment variable), how
// detrace ends when a signal killed the command, a signal that reaches the command twice (a
// process-group kill) or comes from a hung-up terminal, and commands detrace cannot start as given.
// Every wait is bounded: a regression fails the test instead of hanging it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"
#include "detrace/db/reader.h"
#include "line_child.h"

extern char** environ;

namespace detrace {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string binDir() { return DETRACE_BINARY_DIR; }
std::string detrace() { return binDir() + "/replay/detrace"; }
std::string controlApp() { return binDir() + "/tests/control_app"; }

using Output = testing::ShellOutput;
Output sh(const std::string& cmd) { return testing::runShell(cmd); }

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// This process's environment with `extra` ("KEY=value" each) set over it.
std::vector<std::string> environmentWith(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('=') + 1);
    bool replaced = false;
    for (const std::string& x : extra) replaced |= x.rfind(key, 0) == 0;
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// Whether process `pid` is gone (or a zombie: it has ended, its parent has not reaped it yet).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = all.rfind(')');
  return paren == std::string::npos || paren + 2 >= all.size() || all[paren + 2] == 'Z' ||
         all[paren + 2] == 'X';
}

bool waitUntil(milliseconds limit, const std::function<bool()>& done) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

// A process started with fork and execve: optionally in a process group of its own, its stdin and
// stdout through pipes (line by line, as tests/tracer/line_child.h) or /dev/null and a file. SIGINT, SIGTERM, SIGHUP and SIGQUIT start at their default action
// (whatever the test runner left), and no signal is blocked. Killed (its group too) if the test
// leaves it running.
class Process {
 public:
  // `output`: the file stdout (without pipes) and stderr go to; `own_group`: in a process group
  // of its own; `pipes`: stdin and stdout through pipes.
  Process(std::vector<std::string> args, std::vector<std::string> env, const std::string& output,
          bool own_group = false, bool pipes = false)
      : own_group_(own_group) {
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipes && (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)) return;
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      if (own_group) setpgid(0, 0);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      const int log = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = open("/dev/null", O_RDONLY);
      dup2(pipes ? in[0] : null, 0);
      dup2(pipes ? out[1] : log, 1);
      dup2(log, 2);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (own_group && pid_ > 0) setpgid(pid_, pid_);  // either side may come first
    if (pipes) {
      close(in[0]);
      close(out[1]);
      to_ = in[1];
      from_ = out[0];
    }
  }
  ~Process() {
    if (pid_ > 0 && !reaped_) {
      kill(own_group_ ? -pid_ : pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  std::string line(int timeout_ms = 20000) { return testing::readLine(from_, timeout_ms); }
  std::string send(const std::string& cmd) { return testing::writeLine(to_, cmd) ? line() : "<write failed>"; }
  int to() const { return to_; }  // its stdin, for a line that gets no answer

  // Its wait status once it has ended; nullopt if it is still running after `limit`.
  std::optional<int> waitFor(milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      if (reaped_) return status_;
      const pid_t r = waitpid(pid_, &status_, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        reaped_ = true;
        return status_;
      }
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }

 private:
  pid_t pid_ = -1;
  bool own_group_ = false;
  bool reaped_ = false;
  int status_ = 0;
  int to_ = -1, from_ = -1;
};

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {:#x}", status);
}

// The element counts of a trace's ncclAllReduce calls, in recorded order, and whether its writer
// closed it (TraceReader::finished).
struct TraceSeen {
  bool opened = false;
  bool finished = false;
  std::vector<int64_t> counts;
  std::string error;
};
TraceSeen readTrace(const std::string& path) {
  TraceSeen seen;
  auto r = db::TraceReader::open(path);
  if (!r.isOk()) {
    seen.error = r.status().message();
    return seen;
  }
  seen.opened = true;
  seen.finished = (*r)->finished();
  if (auto colls = (*r)->collectives(); colls.isOk()) {
    for (const auto& [seq, c] : *colls) seen.counts.push_back(c.count);
  }
  return seen;
}

// ------------------------------------------------------------------ what the command inherits

// A signal detrace was started ignoring (nohup, `trap '' HUP`, a background job's SIGINT) is
// still ignored in the command, as it would be without detrace: its SigIgn mask is the one the
// same command shows when started without detrace. (Before, detrace caught the signal to forward
// it, and exec reset a caught signal to its default: `nohup detrace record ...` died on a hangup.)
TEST(RecordLaunch, SignalsDetraceWasStartedIgnoringStayIgnoredInTheCommand) {
  TempDir tmp;
  Output plain = sh("trap '' HUP TERM; exec grep SigIgn /proc/self/status");
  ASSERT_EQ(plain.status, 0) << plain.out;
  Output o = sh(fmt::format("trap '' HUP TERM; exec {} record -o {} -- grep SigIgn /proc/self/status",
                            detrace(), tmp.file("run")));
  ASSERT_EQ(o.status, 0) << o.out;
  const size_t at = o.out.find("SigIgn:");
  ASSERT_NE(at, std::string::npos) << o.out;
  const std::string mask = o.out.substr(at, o.out.find('\n', at) - at);
  const uint64_t bits = std::stoull(mask.substr(mask.find_first_of("0123456789abcdef")), nullptr, 16);
  EXPECT_NE(bits & (uint64_t{1} << (SIGHUP - 1)), 0u) << "SIGHUP is no longer ignored: " << mask;
  EXPECT_NE(bits & (uint64_t{1} << (SIGTERM - 1)), 0u) << "SIGTERM is no longer ignored: " << mask;
  EXPECT_EQ(mask + "\n", plain.out) << "the command's ignored signals differ from those without detrace";
}

// An empty NCCL_PROFILER_PLUGIN= or NVTX_INJECTION64_PATH= in detrace's environment (an
// `export NCCL_PROFILER_PLUGIN=` left in a job script) is not passed on beside the tracer's own:
// with two entries, getenv in NCCL, NVTX and the tracer takes the first, the empty one.
TEST(RecordLaunch, AnInheritedEmptyTracerVariableIsPassedOnce) {
  TempDir tmp;
  const std::string cupti = tmp.file("cupti-stand-in.so");  // NVTX is pointed at it; never loaded
  std::ofstream(cupti) << "";
  Output o = sh(fmt::format("NCCL_PROFILER_PLUGIN= NVTX_INJECTION64_PATH= DETRACE_CUPTI_LIB={} "
                            "{} record -o {} -- /usr/bin/env",
                            cupti, detrace(), tmp.file("run")));
  ASSERT_EQ(o.status, 0) << o.out;
  std::vector<std::string> plugin, nvtx;
  std::istringstream lines(o.out);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("NCCL_PROFILER_PLUGIN=", 0) == 0) plugin.push_back(l);
    if (l.rfind("NVTX_INJECTION64_PATH=", 0) == 0) nvtx.push_back(l);
  }
  EXPECT_EQ(plugin, (std::vector<std::string>{"NCCL_PROFILER_PLUGIN=" + binDir() + "/tracer/libdetrace_tracer.so"}))
      << "the command's entries for NCCL_PROFILER_PLUGIN";
  EXPECT_EQ(nvtx, (std::vector<std::string>{"NVTX_INJECTION64_PATH=" + cupti}))
      << "the command's entries for NVTX_INJECTION64_PATH";
}

// detrace's own library as NCCL_PROFILER_PLUGIN (a detrace record run under another) is no user's
// plugin: no warning that NCCL will not report to detrace, and one entry.
TEST(RecordLaunch, DetracesOwnPluginInTheEnvironmentIsNoUsersPlugin) {
  TempDir tmp;
  const std::string lib = binDir() + "/tracer/libdetrace_tracer.so";
  Output o = sh(fmt::format("NCCL_PROFILER_PLUGIN={} {} record -o {} -- /usr/bin/env", lib, detrace(), tmp.file("run")));
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_EQ(o.out.find("will not report"), std::string::npos) << o.out;
  std::istringstream lines(o.out);
  int entries = 0;
  for (std::string l; std::getline(lines, l);) entries += l == "NCCL_PROFILER_PLUGIN=" + lib ? 1 : 0;
  EXPECT_EQ(entries, 1) << o.out;
}

// ------------------------------------------------------------------ how detrace ends

// A command killed by SIGINT, SIGTERM or SIGHUP kills detrace with the same signal once detrace
// has printed its summary, so that the shell running detrace sees an interrupt (and a script
// stops on Ctrl-C) as it would without detrace; detrace does not just exit with 128 + N. Another
// signal (SIGKILL) still gives 128 + N.
TEST(RecordLaunch, ACommandKilledByAnInterruptKillsDetraceWithTheSameSignal) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    TempDir tmp;
    Process p({detrace(), "record", "-o", tmp.file("run"), "--", "/bin/sh", "-c",
               fmt::format("kill -{} $$", sig)},
              environmentWith({}), tmp.file("out"));
    const std::optional<int> status = p.waitFor(milliseconds(30000));
    ASSERT_TRUE(status.has_value()) << "detrace still runs after 30 s";
    const std::string out = readFile(tmp.file("out"));
    EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == sig) << describe(*status) << "\n" << out;
    EXPECT_NE(out.find(fmt::format("was killed by signal {} ({}; exit status {})", sig, strsignal(sig), 128 + sig)),
              std::string::npos)
        << "the summary was not printed first:\n" << out;
  }
  TempDir tmp;
  Process p({detrace(), "record", "-o", tmp.file("run"), "--", "/bin/sh", "-c", "kill -KILL $$"},
            environmentWith({}), tmp.file("out"));
  const std::optional<int> status = p.waitFor(milliseconds(30000));
  ASSERT_TRUE(status.has_value()) << "detrace still runs after 30 s";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + SIGKILL)
      << describe(*status) << "\n" << readFile(tmp.file("out"));
}

// ------------------------------------------------------------------ signals that come twice

// A process-group kill (timeout(1), systemd, Slurm, kill -TERM -PGID) reaches the command
// directly and again through detrace's forwarding, milliseconds apart. The tracer takes the copy
// for what it is, not for a second signal that cuts the finish short: the trace is finished and
// holds every call. (Before, the copy killed the command at once and left the trace unfinished.)
// The command leaves SIGTERM at its default action; detrace then dies of SIGTERM too.
TEST(RecordLaunch, AProcessGroupKillFinishesTheTrace) {
  TempDir tmp;
  const std::string xdg = tmp.file("xdg");
  fs::create_directories(xdg);
  fs::permissions(xdg, fs::perms::owner_all);
  const std::string run = tmp.file("run");
  Process p({detrace(), "record", "-o", run, "--", controlApp()},
            environmentWith({"XDG_RUNTIME_DIR=" + xdg}), tmp.file("err"), /*own_group=*/true,
            /*pipes=*/true);
  const std::string ready = p.line();
  ASSERT_EQ(ready.rfind("ready ", 0), 0u) << ready << "\n" << readFile(tmp.file("err"));
  const pid_t app = std::stoi(ready.substr(6));
  std::vector<int64_t> made;
  for (int c = 1; c <= 50; ++c) {
    ASSERT_EQ(p.send(fmt::format("call {}", c)), "ok");
    made.push_back(c);
  }
  ASSERT_EQ(kill(-p.pid(), SIGTERM), 0) << std::strerror(errno);
  const std::optional<int> status = p.waitFor(milliseconds(30000));
  ASSERT_TRUE(status.has_value()) << "detrace still runs 30 s after the group's SIGTERM";
  const std::string err = readFile(tmp.file("err"));
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM) << describe(*status) << "\n" << err;
  const TraceSeen trace = readTrace(fmt::format("{}/proc-{}.dtrace", run, app));
  ASSERT_TRUE(trace.opened) << trace.error << "\n" << err;
  EXPECT_TRUE(trace.finished) << "the trace was not finished: the copy of the SIGTERM killed the "
                                 "command during the finish\n" << err;
  EXPECT_EQ(trace.counts, made);
  Output info = sh(fmt::format("{} info {}", detrace(), run));
  EXPECT_EQ(info.out.find("not finished"), std::string::npos) << info.out;
}

// control_app under the tracer (LD_PRELOAD, as tests/tracer/cpu_attach_signal_test.cc starts it),
// its writer held DETRACE_DIAG_WRITER_HOLD_MS inside every batch: a slow disk, so that finishing
// the trace after a SIGTERM takes at least that long. `calls` ncclAllReduce calls made.
// This test process stands for `detrace record` (DETRACE_LAUNCHER_PID) unless `launcher` is false:
// then it is only the program's parent, as torchrun's agent is to its workers.
struct SlowFinishApp {
  SlowFinishApp(const TempDir& tmp, int hold_ms, int calls, const std::string& flag = "", bool launcher = true)
      : run(tmp.file("run")),
        xdg(tmp.file("xdg")),
        p(flag.empty() ? std::vector<std::string>{controlApp()} : std::vector<std::string>{controlApp(), flag},
          start(hold_ms, launcher), tmp.file("err"), /*own_group=*/false, /*pipes=*/true) {
    const std::string ready = p.line();
    EXPECT_EQ(ready, "ready " + std::to_string(p.pid())) << readFile(tmp.file("err"));
    for (int c = 1; c <= calls; ++c) EXPECT_EQ(p.send(fmt::format("call {}", c)), "ok");
  }
  std::string trace() const { return fmt::format("{}/proc-{}.dtrace", run, p.pid()); }

  // Makes its directories; the environment it starts with.
  std::vector<std::string> start(int hold_ms, bool launcher) {
    fs::create_directories(run);
    fs::create_directories(xdg);
    fs::permissions(xdg, fs::perms::owner_all);
    const std::string lib = binDir() + "/tracer/libdetrace_tracer.so";
    std::vector<std::string> env = {"LD_PRELOAD=" + lib, "NCCL_PROFILER_PLUGIN=" + lib, "DETRACE_OUT_DIR=" + run,
                                    "XDG_RUNTIME_DIR=" + xdg, "PATH=/usr/bin:/bin",
                                    fmt::format("DETRACE_DIAG_WRITER_HOLD_MS={}", hold_ms)};
    if (launcher) env.push_back(fmt::format("DETRACE_LAUNCHER_PID={}", getpid()));
    return env;
  }

  std::string run, xdg;
  Process p;
};

// The same copy made deterministic: a SIGTERM from elsewhere (a process-group kill's), then the
// same signal from the program's parent (this test, standing for `detrace record` forwarding it)
// 100 ms later, while the finish is held up: the copy does not kill the program; it dies of
// SIGTERM once the trace is finished.
TEST(RecordLaunch, ACopyOfTheSignalWithinASecondDoesNotCutTheFinishShort) {
  TempDir tmp;
  SlowFinishApp app(tmp, /*hold_ms=*/1000, /*calls=*/5);
  ASSERT_EQ(sh(fmt::format("kill -TERM {}", app.p.pid())).status, 0) << "sent by a shell, not the parent";
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_EQ(kill(app.p.pid(), SIGTERM), 0);
  EXPECT_FALSE(app.p.waitFor(milliseconds(300)).has_value())
      << "the copy killed the program while its trace was being finished";
  const std::optional<int> status = app.p.waitFor(milliseconds(20000));
  ASSERT_TRUE(status.has_value()) << "the program still runs 20 s after SIGTERM";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM) << describe(*status);
  const TraceSeen trace = readTrace(app.trace());
  ASSERT_TRUE(trace.opened) << trace.error;
  EXPECT_TRUE(trace.finished);
  EXPECT_EQ(trace.counts, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// A program that handles the signal itself (here its own SIGINT handler, which prints "sigint"
// and goes on) sees a process-group kill once: the same signal from `detrace record` (this test,
// standing for it) within a second of one from elsewhere is that signal's copy and is dropped.
// detrace's signal alone, or one more than a second later, is a signal of its own and reaches the
// handler.
TEST(RecordLaunch, AProgramsOwnHandlerSeesTheCopyOfASignalOnce) {
  TempDir tmp;
  SlowFinishApp app(tmp, /*hold_ms=*/0, /*calls=*/1, "--own-sigint");
  ASSERT_EQ(sh(fmt::format("kill -INT {}", app.p.pid())).status, 0) << "sent by a shell, not the parent";
  EXPECT_EQ(app.p.line(), "sigint");
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_EQ(kill(app.p.pid(), SIGINT), 0);  // the copy
  EXPECT_EQ(app.p.send("call 2"), "ok") << "the copy reached the program's handler";
  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_EQ(kill(app.p.pid(), SIGINT), 0);  // more than a second after: a signal of its own
  EXPECT_EQ(app.p.line(), "sigint");
  ASSERT_EQ(kill(app.p.pid(), SIGINT), 0);  // the parent's alone, again
  EXPECT_EQ(app.p.line(), "sigint");
  EXPECT_EQ(app.p.send("call 3"), "ok");
  ASSERT_TRUE(testing::writeLine(app.p.to(), "exit"));
  const std::optional<int> status = app.p.waitFor(milliseconds(20000));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe(*status);
}

// A parent that is not `detrace record` (torchrun's agent passing a signal on to its workers) is
// not taken for detrace: its copy reaches the program's handler, as it would without the tracer.
TEST(RecordLaunch, AnotherParentsCopyOfASignalStillReachesTheProgram) {
  TempDir tmp;
  SlowFinishApp app(tmp, /*hold_ms=*/0, /*calls=*/1, "--own-sigint", /*launcher=*/false);
  ASSERT_EQ(sh(fmt::format("kill -INT {}", app.p.pid())).status, 0) << "sent by a shell, not the parent";
  EXPECT_EQ(app.p.line(), "sigint");
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_EQ(kill(app.p.pid(), SIGINT), 0);
  EXPECT_EQ(app.p.line(), "sigint") << "the parent's signal was dropped";
  EXPECT_EQ(app.p.send("call 2"), "ok");
  ASSERT_TRUE(testing::writeLine(app.p.to(), "exit"));
  const std::optional<int> status = app.p.waitFor(milliseconds(20000));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe(*status);
}

// End to end: `detrace record` of a program with its own SIGINT handler, killed as a process
// group (kill -INT -PGID, as timeout(1) and job control send it). The program's handler runs once
// and the program runs on until told to exit. (Without the tracer's drop of the copy this often
// passes too: a signal still pending takes no second copy, and detrace's usually comes that soon.
// The test above makes the late copy certain; this one checks the whole path.)
TEST(RecordLaunch, AProcessGroupKillReachesTheProgramsHandlerOnce) {
  TempDir tmp;
  const std::string xdg = tmp.file("xdg");
  fs::create_directories(xdg);
  fs::permissions(xdg, fs::perms::owner_all);
  Process p({detrace(), "record", "-o", tmp.file("run"), "--", controlApp(), "--own-sigint"},
            environmentWith({"XDG_RUNTIME_DIR=" + xdg}), tmp.file("err"), /*own_group=*/true,
            /*pipes=*/true);
  const std::string ready = p.line();
  ASSERT_EQ(ready.rfind("ready ", 0), 0u) << ready << "\n" << readFile(tmp.file("err"));
  ASSERT_EQ(p.send("call 1"), "ok");
  ASSERT_EQ(kill(-p.pid(), SIGINT), 0) << std::strerror(errno);
  EXPECT_EQ(p.line(), "sigint") << readFile(tmp.file("err"));
  std::this_thread::sleep_for(milliseconds(300));  // detrace's copy has long arrived
  EXPECT_EQ(p.send("call 2"), "ok") << "the program's handler ran twice";
  ASSERT_TRUE(testing::writeLine(p.to(), "exit"));
  const std::optional<int> status = p.waitFor(milliseconds(30000));
  ASSERT_TRUE(status.has_value()) << "detrace still runs 30 s after the command's exit";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe(*status) << "\n"
                                                               << readFile(tmp.file("err"));
}

// Two signals from the same sender soon after each other (a double Ctrl-C, two kills by hand) are
// two signals, not a signal and its copy: the second kills at once.
TEST(RecordLaunch, TheSameSenderTwiceStillKillsAtOnce) {
  TempDir tmp;
  SlowFinishApp app(tmp, /*hold_ms=*/5000, /*calls=*/5);
  const auto first = Clock::now();
  ASSERT_EQ(sh(fmt::format("kill -TERM {0}; sleep 0.1; kill -TERM {0}", app.p.pid())).status, 0);
  const std::optional<int> status = app.p.waitFor(milliseconds(20000));
  ASSERT_TRUE(status.has_value()) << "the program still runs 20 s after the second SIGTERM";
  EXPECT_LT(Clock::now() - first, milliseconds(3000)) << "the second signal was taken for a copy";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM) << describe(*status);
}

// A true second signal, more than a second after the first, still kills at once: the program dies
// of it long before its held-up finish would have ended (and its trace is left unfinished).
TEST(RecordLaunch, ASecondSignalAfterASecondStillKillsAtOnce) {
  TempDir tmp;
  SlowFinishApp app(tmp, /*hold_ms=*/5000, /*calls=*/5);
  const auto first = Clock::now();
  ASSERT_EQ(kill(app.p.pid(), SIGTERM), 0);
  EXPECT_FALSE(app.p.waitFor(milliseconds(1200)).has_value()) << "the finish was not held up: the test shows nothing";
  ASSERT_EQ(kill(app.p.pid(), SIGTERM), 0);
  const std::optional<int> status = app.p.waitFor(milliseconds(20000));
  ASSERT_TRUE(status.has_value()) << "the program still runs 20 s after the second SIGTERM";
  EXPECT_LT(Clock::now() - first, milliseconds(3000)) << "the second signal did not kill at once";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGTERM) << describe(*status);
  const TraceSeen trace = readTrace(app.trace());
  EXPECT_FALSE(trace.opened && trace.finished) << "finished although killed during the finish";
}

// When detrace leads its session (ssh host detrace record ..., a pty of its own) and its terminal
// hangs up, the kernel sends SIGHUP to detrace alone: detrace passes it on and the command ends.
// (Before, a signal from the kernel was never forwarded, taken for the terminal's Ctrl-C that had
// reached the command already, and the command ran on after the connection was gone.)
TEST(RecordLaunch, AHangupOfTheTerminalOfASessionLeaderEndsTheCommand) {
  TempDir tmp;
  const std::string pidfile = tmp.file("command.pid");
  const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0) << std::strerror(errno);
  ASSERT_EQ(fcntl(master, F_SETFL, O_NONBLOCK), 0) << std::strerror(errno);
  ASSERT_EQ(grantpt(master), 0) << std::strerror(errno);
  ASSERT_EQ(unlockpt(master), 0) << std::strerror(errno);
  std::string slave = ptsname(master);
  std::vector<std::string> args = {detrace(), "record", "-o", tmp.file("run"), "--", "/bin/sh", "-c",
                                   fmt::format("echo $$ > {}.tmp && mv {}.tmp {} && exec sleep 30",
                                               pidfile, pidfile, pidfile)};
  std::vector<std::string> env = environmentWith({});
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t leader = fork();
  ASSERT_GE(leader, 0);
  if (leader == 0) {
    setsid();
    const int tty = open(slave.c_str(), O_RDWR);
    if (tty < 0 || ioctl(tty, TIOCSCTTY, 0) != 0) _exit(126);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(tty, 0);
    dup2(tty, 1);
    dup2(tty, 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  pid_t command = -1;
  auto cleanup = [&] {
    if (command > 0 && !ended(command)) kill(command, SIGKILL);
    kill(leader, SIGKILL);
    waitpid(leader, nullptr, 0);
  };
  // The master is drained meanwhile, so that detrace never waits on a full terminal.
  char buf[4096];
  std::string seen;
  const bool started = waitUntil(milliseconds(20000), [&] {
    for (ssize_t n; (n = read(master, buf, sizeof buf)) > 0 && seen.size() < 65536;) seen.append(buf, n);
    std::ifstream in(pidfile);
    return static_cast<bool>(in >> command);
  });
  if (!started) {
    close(master);
    cleanup();
    FAIL() << "the command did not start within 20 s:\n" << seen;
  }
  ASSERT_GT(command, 0);
  ASSERT_FALSE(ended(command));
  close(master);  // the terminal hangs up
  const bool gone = waitUntil(milliseconds(5000), [&] { return ended(command); });
  EXPECT_TRUE(gone) << "the command still runs 5 s after its terminal hung up";
  int status = 0;
  const bool leader_gone = waitUntil(milliseconds(gone ? 10000 : 0), [&] {
    return waitpid(leader, &status, WNOHANG) == leader;
  });
  if (!gone || !leader_gone) {
    cleanup();
    FAIL() << "detrace " << (leader_gone ? "ended" : "still runs") << "; output:\n" << seen;
  }
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGHUP) << describe(status);
}

// ------------------------------------------------------------------ commands it cannot start

// A script whose #! line names an interpreter that does not exist is refused with a message that
// says so (not just "No such file or directory" about a file that is there), and RUN_DIR is left
// as it was: one detrace created is gone again, an empty one given stays empty, so the same
// command line works once the script is fixed.
TEST(RecordLaunch, AScriptWhoseInterpreterIsMissingIsRefusedAndLeavesRunDirReusable) {
  TempDir tmp;
  const std::string script = tmp.file("bad.py");
  std::ofstream(script) << "#!/nonexistent/python9\nprint(1)\n";
  fs::permissions(script, fs::perms::owner_all);
  const std::string fresh = tmp.file("fresh");
  Output o = sh(fmt::format("{} record -o {} -- {}", detrace(), fresh, script));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_NE(o.out.find(script), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("interpreter"), std::string::npos) << "the message does not name the interpreter:\n" << o.out;
  EXPECT_FALSE(fs::exists(fresh)) << "RUN_DIR did not exist before, and does after";

  const std::string given = tmp.file("given");
  fs::create_directories(given);
  o = sh(fmt::format("{} record -o {} -- {}", detrace(), given, script));
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_TRUE(fs::is_directory(given) && fs::is_empty(given)) << "RUN_DIR was empty before, and is not after";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  o = sh(fmt::format("{} record -o {} -- {}", detrace(), given, script));
  EXPECT_EQ(o.status, 0) << "the same command line, once the script is fixed:\n" << o.out;
  EXPECT_EQ(o.out.find("not empty"), std::string::npos) << o.out;
}

// A script without a #! line runs under /bin/sh, as a shell (and execvp) runs it; it is recorded
// and its exit status is detrace's.
TEST(RecordLaunch, AScriptWithoutAShebangRunsUnderSh) {
  TempDir tmp;
  const std::string script = tmp.file("plain-script");
  std::ofstream(script) << "echo \"ran as [$0] with [$1]\"\nexit 7\n";
  fs::permissions(script, fs::perms::owner_all);
  Output o = sh(fmt::format("{} record -o {} -- {} arg1", detrace(), tmp.file("run"), script));
  EXPECT_EQ(o.status, 7) << o.out;
  EXPECT_NE(o.out.find(fmt::format("ran as [{}] with [arg1]", script)), std::string::npos) << o.out;
}

// A command that never uses the GPU leaves no trace file: record's summary and info say why (it
// ran to its end without a call detrace records), not that it was killed or the directory wrong.
TEST(RecordLaunch, ACommandWithoutGpuCallsIsToldApartFromAKilledOne) {
  TempDir tmp;
  const int code = static_cast<int>(testing::Rng().range(0, 9));
  Output o = sh(fmt::format("{} record -o {} -- /bin/sh -c 'exit {}'", detrace(), tmp.file("run"), code));
  EXPECT_EQ(o.status, code) << o.out;
  EXPECT_NE(o.out.find("0 process trace(s) in " + tmp.file("run") +
                       ": no process of the command made a CUDA, NCCL or cuBLAS call that detrace records"),
            std::string::npos) << o.out;
  Output info = sh(fmt::format("{} info {}", detrace(), tmp.file("run")));
  EXPECT_EQ(info.status, 2) << info.out;
  EXPECT_NE(info.out.find(fmt::format("its command ran to its end (exit status {}) and no process of it made "
                                      "a CUDA, NCCL or cuBLAS call that detrace records", code)),
            std::string::npos) << info.out;
  // Recorded --paused and never started: that is what is said, not a program without GPU calls.
  Output paused = sh(fmt::format("{} record --paused -o {} -- /bin/true", detrace(), tmp.file("paused")));
  EXPECT_EQ(paused.status, 0) << paused.out;
  EXPECT_NE(paused.out.find(": recording was never started (detrace attach RUN_DIR start)"), std::string::npos)
      << paused.out;
  Output paused_info = sh(fmt::format("{} info {}", detrace(), tmp.file("paused")));
  EXPECT_NE(paused_info.out.find("it was recorded with --paused and recording was never started"),
            std::string::npos) << paused_info.out;
}

// A tracer library whose path holds a space (or a colon) cannot be put in LD_PRELOAD, which ld.so
// splits there: detrace refuses it before starting anything, naming DETRACE_TRACER_LIB, instead
// of running the command unrecorded with only ld.so's complaint.
TEST(RecordLaunch, ATracerLibraryPathWithASpaceOrColonIsRefused) {
  for (const char* dir : {"with space", "with:colon"}) {
    SCOPED_TRACE(dir);
    TempDir tmp;
    const std::string lib = tmp.file(dir) + "/libdetrace_tracer.so";
    fs::create_directories(tmp.file(dir));
    fs::copy_file(binDir() + "/tracer/libdetrace_tracer.so", lib);
    Output o = sh(fmt::format("DETRACE_TRACER_LIB='{}' {} record -o {} -- /bin/true", lib, detrace(),
                              tmp.file("run")));
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_NE(o.out.find("DETRACE_TRACER_LIB"), std::string::npos) << o.out;
    EXPECT_FALSE(fs::exists(tmp.file("run"))) << "refused after RUN_DIR was made";
  }
}

}  // namespace
}  // namespace detrace
