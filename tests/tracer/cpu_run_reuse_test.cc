// A run directory used again, and the processes behind a run, end to end without a GPU:
// `detrace record --force` replaces a finished run's own files and nothing else, and refuses a run
// still being recorded (its launcher, or a program recording into it); `-o` does not take a flag
// for a name; the manifest names its launcher and the signal that killed the command; `detrace
// attach` takes the launcher's pid for its run; a start without --capture goes back to the level
// the process was recorded with, and the trace names every level it captured at.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/tracer/run_processes.h"
#include "line_child.h"

extern char** environ;

namespace detrace {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string detrace() { return testing::detraceExe(); }
std::string controlApp() { return std::string(DETRACE_BINARY_DIR) + "/tests/control_app"; }
testing::ShellOutput sh(const std::string& cmd) { return testing::runShell(cmd); }

// This process's environment with a private XDG_RUNTIME_DIR (the control sockets' directory).
std::vector<std::string> environmentWithXdg(const std::string& xdg) {
  fs::create_directories(xdg);
  fs::permissions(xdg, fs::perms::owner_all);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("XDG_RUNTIME_DIR=", 0) != 0) env.push_back(*e);
  }
  env.push_back("XDG_RUNTIME_DIR=" + xdg);
  return env;
}

// A pid that no process has now: a child's, once it has been reaped.
pid_t pidOfAnEndedProcess() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

void touch(const fs::path& p) { std::ofstream(p) << "mine\n"; }

TEST(RunFiles, OnlyTheRunsOwnNamesArePicked) {
  for (const char* name : {"proc-12.dtrace", "proc-12.dtrace-wal", "proc-12.dtrace-shm",
                           "proc-12.dtrace-journal", "proc-12.dtrace-control"}) {
    EXPECT_EQ(tracer::pidOfRunFile(name), 12) << name;
  }
  for (const char* name : {"analysis.dtrace.ipynb", "my.dtrace-notes.txt", "sub.dtrace", "proc-.dtrace",
                           "proc-12.dtrace.bak", "proc-12x.dtrace", "xproc-12.dtrace", "proc-0.dtrace",
                           "proc-99999999999.dtrace", "manifest.json", "proc-12.dtrace-wal2"}) {
    EXPECT_EQ(tracer::pidOfRunFile(name), -1) << name;
  }
}

// --force on a finished run removes its manifest and its processes' files (trace, SQLite side
// files, control pointer) and leaves everything else: a notebook named after a trace, a folder.
TEST(RunReuse, ForceReplacesOnlyTheRunsOwnFiles) {
  TempDir tmp;
  const fs::path run = tmp.file("run");
  ASSERT_EQ(sh(fmt::format("{} record -o {} -- true", detrace(), run.string())).status, 0);
  const pid_t gone = pidOfAnEndedProcess();
  const std::vector<std::string> own = {fmt::format("proc-{}.dtrace", gone), fmt::format("proc-{}.dtrace-wal", gone),
                                        fmt::format("proc-{}.dtrace-shm", gone),
                                        fmt::format("proc-{}.dtrace-control", gone)};
  for (const std::string& f : own) touch(run / f);
  const std::vector<std::string> users = {"analysis.dtrace.ipynb", "my.dtrace-notes.txt", "keep.txt"};
  for (const std::string& f : users) touch(run / f);
  fs::create_directory(run / "sub.dtrace");
  const testing::ShellOutput again = sh(fmt::format("{} record -o {} --force -- true", detrace(), run.string()));
  ASSERT_EQ(again.status, 0) << again.out;
  for (const std::string& f : own) EXPECT_FALSE(fs::exists(run / f)) << f << " of the old run is still there";
  for (const std::string& f : users) EXPECT_TRUE(fs::exists(run / f)) << "the user's " << f << " was deleted";
  EXPECT_TRUE(fs::is_directory(run / "sub.dtrace")) << "the user's folder was deleted";
  EXPECT_TRUE(db::readManifest(run.string()).isOk());
}

// While its `detrace record` runs (no trace file yet: the command made no CUDA call), the run is
// not replaced; once it has ended, it is.
TEST(RunReuse, ForceRefusesARunWhoseRecorderStillRuns) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  testing::LineChild rec(detrace(), {"record", "-o", run, "--", "/bin/sh", "-c", "echo up; read x"},
                         environmentWithXdg(tmp.file("xdg")));
  ASSERT_EQ(rec.line(), "up");
  const auto live = tracer::liveProcessesOfRun(run);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_TRUE(live[0].launcher);
  EXPECT_EQ(live[0].pid, rec.pid());
  const testing::ShellOutput refused = sh(fmt::format("{} record -o {} --force -- true", detrace(), run));
  EXPECT_EQ(refused.status, 2) << refused.out;
  EXPECT_NE(refused.out.find("still being recorded by process " + std::to_string(rec.pid())), std::string::npos)
      << refused.out;
  EXPECT_TRUE(db::readManifest(run).isOk()) << "the live run's manifest was removed";
  rec.say("done");
  const int status = rec.wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(tracer::liveProcessesOfRun(run).empty());
  const testing::ShellOutput replaced = sh(fmt::format("{} record -o {} --force -- true", detrace(), run));
  EXPECT_EQ(replaced.status, 0) << replaced.out;
}

// A recorded program whose launcher was killed (SIGKILL: nothing passed on) goes on recording into
// the run: --force refuses it by the program's own files, and its trace keeps what it recorded.
TEST(RunReuse, ForceRefusesARunWhoseProgramOutlivedItsRecorder) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  testing::LineChild rec(detrace(), {"record", "-o", run, "--", controlApp()}, environmentWithXdg(tmp.file("xdg")));
  const std::string ready = rec.line();
  ASSERT_EQ(ready.rfind("ready ", 0), 0u) << ready;
  const pid_t app = std::stoi(ready.substr(6));
  ASSERT_EQ(rec.send("call 7"), "ok");
  ASSERT_EQ(kill(rec.pid(), SIGKILL), 0);
  (void)rec.wait();
  const auto live = tracer::liveProcessesOfRun(run);
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].pid, app);
  EXPECT_FALSE(live[0].launcher);
  const testing::ShellOutput refused = sh(fmt::format("{} record -o {} --force -- true", detrace(), run));
  EXPECT_EQ(refused.status, 2) << refused.out;
  EXPECT_NE(refused.out.find(fmt::format("process {} (recording)", app)), std::string::npos) << refused.out;
  ASSERT_EQ(kill(app, SIGTERM), 0);  // the tracer finishes the trace and the program dies of it
  for (int i = 0; i < 2000 && tracer::processAlive(app); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_FALSE(tracer::processAlive(app));
  auto reader = db::TraceReader::open(fmt::format("{}/proc-{}.dtrace", run, app));
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  auto colls = (*reader)->collectives();
  ASSERT_TRUE(colls.isOk());
  ASSERT_EQ(colls->size(), 1u) << "the call recorded before --force was tried is gone";
  EXPECT_EQ(colls->front().second.count, 7);
}

// What --force will not take for a finished run's: trace files that are no recorded process's own
// (they would be read as ranks of the new run), and a run recorded on another host that has not
// ended (its processes cannot be seen from here).
TEST(RunReuse, ForceRefusesForeignTracesAndAnUnendedRunOfAnotherHost) {
  TempDir tmp;
  const fs::path run = tmp.file("run");
  ASSERT_EQ(sh(fmt::format("{} record -o {} -- true", detrace(), run.string())).status, 0);
  touch(run / "baseline.dtrace");
  const testing::ShellOutput foreign = sh(fmt::format("{} record -o {} --force -- true", detrace(), run.string()));
  EXPECT_EQ(foreign.status, 2) << foreign.out;
  EXPECT_NE(foreign.out.find("not a recorded process's own (baseline.dtrace)"), std::string::npos) << foreign.out;
  EXPECT_TRUE(fs::exists(run / "baseline.dtrace"));
  fs::remove(run / "baseline.dtrace");
  auto m = db::readManifest(run.string());
  ASSERT_TRUE(m.isOk());
  m->host = "another-host-of-the-cluster";
  m->end_time_ns = 0;
  ASSERT_TRUE(db::writeManifest(run.string(), *m).isOk());
  const testing::ShellOutput elsewhere = sh(fmt::format("{} record -o {} --force -- true", detrace(), run.string()));
  EXPECT_EQ(elsewhere.status, 2) << elsewhere.out;
  EXPECT_NE(elsewhere.out.find("recorded on host another-host-of-the-cluster and has not ended"), std::string::npos)
      << elsewhere.out;
}

// A pid named by a run's files that now belongs to a process started after they were last written
// (the pid handed out again), or to a process that does not record into the run, is no reason to
// refuse --force.
TEST(RunReuse, APidHandedOutAgainIsNotALiveRecorder) {
  TempDir tmp;
  const fs::path run = tmp.file("run");
  ASSERT_EQ(sh(fmt::format("{} record -o {} -- true", detrace(), run.string())).status, 0);
  testing::LineChild other("/bin/sh", {"-c", "echo up; read x"}, {"DETRACE_OUT_DIR=" + run.string()});
  ASSERT_EQ(other.line(), "up");
  const fs::path trace = run / fmt::format("proc-{}.dtrace", other.pid());
  touch(trace);
  EXPECT_EQ(tracer::liveProcessesOfRun(run.string()).size(), 1u) << "a fresh file of a process recording here";
  fs::last_write_time(trace, fs::file_time_type::clock::now() - std::chrono::hours(1));
  EXPECT_TRUE(tracer::liveProcessesOfRun(run.string()).empty()) << "the process started after its file was written";
  testing::LineChild unrelated("/bin/sh", {"-c", "echo up; read x"}, {"HOME=/"});
  ASSERT_EQ(unrelated.line(), "up");
  touch(run / fmt::format("proc-{}.dtrace-control", unrelated.pid()));
  EXPECT_TRUE(tracer::liveProcessesOfRun(run.string()).empty()) << "a process that records elsewhere";
  const testing::ShellOutput replaced = sh(fmt::format("{} record -o {} --force -- true", detrace(), run.string()));
  EXPECT_EQ(replaced.status, 0) << replaced.out;
  other.say("done");
  unrelated.say("done");
}

TEST(RunReuse, AFlagIsNotTakenForTheRunDirectory) {
  TempDir tmp;
  const testing::ShellOutput out = sh(fmt::format("cd {} && {} record -o -- true", tmp.path().string(), detrace()));
  EXPECT_EQ(out.status, 2) << out.out;
  EXPECT_NE(out.out.find("looks like a flag"), std::string::npos) << out.out;
  EXPECT_FALSE(fs::exists(tmp.file("--")));
}

// A run directory that is a link to nothing, and a command that is a directory or not executable,
// are named for what they are (were: "File exists", "no such executable file").
TEST(RunReuse, WhatCannotBeUsedIsNamedForWhatItIs) {
  TempDir tmp;
  fs::create_symlink(tmp.file("nowhere"), tmp.file("link"));
  const testing::ShellOutput link = sh(fmt::format("{} record -o {} -- true", detrace(), tmp.file("link")));
  EXPECT_EQ(link.status, 2);
  EXPECT_NE(link.out.find("is a symbolic link to " + tmp.file("nowhere") + ", which does not exist"), std::string::npos)
      << link.out;
  const testing::ShellOutput dir = sh(fmt::format("{} record -o {} -- {}", detrace(), tmp.file("r1"), tmp.path().string()));
  EXPECT_EQ(dir.status, 2);
  EXPECT_NE(dir.out.find("is a directory, not a program"), std::string::npos) << dir.out;
  touch(tmp.file("script"));
  fs::permissions(tmp.file("script"), fs::perms::owner_read | fs::perms::owner_write);
  const testing::ShellOutput noexec = sh(fmt::format("{} record -o {} -- {}", detrace(), tmp.file("r2"), tmp.file("script")));
  EXPECT_EQ(noexec.status, 2);
  EXPECT_NE(noexec.out.find("is not executable by you"), std::string::npos) << noexec.out;
  EXPECT_FALSE(fs::exists(tmp.file("r1")) || fs::exists(tmp.file("r2"))) << "a run directory was left behind";
}

// Library paths that cannot even be looked at (a loop of links, a name too long for the system)
// are an error or are passed over, never an abort of detrace (was: an uncaught filesystem_error,
// SIGABRT, the command never run).
TEST(RunReuse, LibraryPathsThatCannotBeLookedAtAreNoAbort) {
  TempDir tmp;
  fs::create_symlink(tmp.file("loop2"), tmp.file("loop1"));
  fs::create_symlink(tmp.file("loop1"), tmp.file("loop2"));
  const testing::ShellOutput tracer =
      sh(fmt::format("DETRACE_TRACER_LIB={} {} record -o {} -- true", tmp.file("loop1"), detrace(), tmp.file("r1")));
  EXPECT_EQ(tracer.status, 2) << tracer.out;
  EXPECT_NE(tracer.out.find("DETRACE_TRACER_LIB names " + tmp.file("loop1") + ", which cannot be used"),
            std::string::npos)
      << tracer.out;
  for (const std::string& cupti : {tmp.file("loop1"), std::string(5000, 'x')}) {
    const testing::ShellOutput out = sh(fmt::format("DETRACE_CUPTI_LIB={} {} record -o {} --force -- true", cupti,
                                                    detrace(), tmp.file("r2")));
    EXPECT_EQ(out.status, 0) << "the command runs (CUPTI is then not found by the tracer): " << out.out;
    EXPECT_EQ(out.out.find("terminate called"), std::string::npos) << out.out;
  }
}

// The manifest says which detrace record made the run (pid and start time) and, apart from an
// exit status of 128 + N, that a signal killed the command.
TEST(RunReuse, TheManifestNamesTheLauncherAndTheSignalThatKilledTheCommand) {
  TempDir tmp;
  const testing::ShellOutput killed =
      sh(fmt::format("{} record -o {} -- /bin/sh -c 'kill -SEGV $$'", detrace(), tmp.file("segv")));
  EXPECT_EQ(killed.status, 139) << killed.out;
  auto m = db::readManifest(tmp.file("segv"));
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m->exit_code, 139);
  EXPECT_EQ(m->term_signal, SIGSEGV);
  EXPECT_GT(m->launcher_pid, 0);
  EXPECT_GT(m->launcher_start_ticks, 0);
  EXPECT_NE(killed.out.find("killed by signal 11"), std::string::npos) << killed.out;
  ASSERT_EQ(sh(fmt::format("{} record -o {} -- /bin/sh -c 'exit 139'", detrace(), tmp.file("exit"))).status, 139);
  auto e = db::readManifest(tmp.file("exit"));
  ASSERT_TRUE(e.isOk());
  EXPECT_EQ(e->exit_code, 139);
  EXPECT_EQ(e->term_signal, 0) << "an exit status of 139 is no signal";
}

// `detrace attach <pid of detrace record>` (the `$!` of `detrace record --paused ... &`) controls
// the run that detrace record makes; a start without --capture is at the recorded level again, and
// the trace names both levels it captured at.
TEST(RunReuse, AttachTakesTheLaunchersPidAndAStartWithoutCaptureGoesBackToTheRecordedLevel) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  const std::string xdg = tmp.file("xdg");
  testing::LineChild rec(detrace(), {"record", "--paused", "--capture", "meta", "-o", run, "--", controlApp()},
                         environmentWithXdg(xdg));
  const std::string ready = rec.line();
  ASSERT_EQ(ready.rfind("ready ", 0), 0u) << ready;
  const pid_t app = std::stoi(ready.substr(6));
  auto attach = [&](const std::string& what) {
    return sh(fmt::format("XDG_RUNTIME_DIR={} {} attach {} {}", xdg, detrace(), rec.pid(), what));
  };
  const testing::ShellOutput status = attach("status");
  ASSERT_EQ(status.status, 0) << status.out;
  EXPECT_NE(status.out.find(std::to_string(app)), std::string::npos) << status.out;
  ASSERT_EQ(attach("start --capture digest").status, 0);
  ASSERT_EQ(rec.send("call 1"), "ok");
  ASSERT_EQ(attach("stop").status, 0);
  const testing::ShellOutput restarted = attach("start");
  ASSERT_EQ(restarted.status, 0) << restarted.out;
  EXPECT_NE(restarted.out.find("meta"), std::string::npos) << "not back at the recorded level: " << restarted.out;
  ASSERT_EQ(rec.send("call 2"), "ok");
  rec.say("exit");
  const int st = rec.wait();
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  auto reader = db::TraceReader::open(fmt::format("{}/proc-{}.dtrace", run, app));
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  EXPECT_EQ((*reader)->metaValue("capture"), "digest,meta");
  const testing::ShellOutput info = sh(fmt::format("{} info {}", detrace(), run));
  EXPECT_NE(info.out.find("capture   digest,meta (in the order its captures used them)"), std::string::npos) << info.out;
}

// `detrace record --paused -o RUN -- control_app` with a private XDG_RUNTIME_DIR, up and ready;
// `app` is the program's pid (-1 if it did not come up).
struct PausedApp {
  std::unique_ptr<testing::LineChild> rec;
  pid_t app = -1;
};
PausedApp startPausedApp(const std::string& run, const std::string& xdg) {
  PausedApp p;
  p.rec = std::make_unique<testing::LineChild>(
      detrace(), std::vector<std::string>{"record", "--paused", "-o", run, "--", controlApp()},
      environmentWithXdg(xdg));
  const std::string ready = p.rec->line();
  if (ready.rfind("ready ", 0) == 0) p.app = std::stoi(ready.substr(6));
  return p;
}

// A socket left in a control directory by a dead process that had the launcher's pid (a crash
// leaves its socket behind) refuses connections; `detrace attach <launcher pid>` passes over it,
// whatever its age (here it is newer than the launcher), and controls the run's process.
TEST(RunReuse, AStaleSocketUnderTheLaunchersPidIsPassedOver) {
  TempDir tmp;
  const std::string xdg = tmp.file("xdg");
  PausedApp p = startPausedApp(tmp.file("run"), xdg);
  ASSERT_GT(p.app, 0);
  const std::string dir = xdg + "/detrace";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  const std::string stale = fmt::format("{}/{}.sock", dir, p.rec->pid());
  {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(stale.size(), sizeof addr.sun_path);
    std::memcpy(addr.sun_path, stale.c_str(), stale.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    ::close(fd);  // the file stays; nothing listens on it
  }
  const testing::ShellOutput status =
      sh(fmt::format("XDG_RUNTIME_DIR={} {} attach {} status", xdg, detrace(), p.rec->pid()));
  EXPECT_EQ(status.status, 0) << status.out;
  EXPECT_NE(status.out.find(std::to_string(p.app)), std::string::npos) << status.out;
  EXPECT_EQ(status.out.find("does not answer"), std::string::npos) << status.out;
  p.rec->say("exit");
  const int st = p.rec->wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

// A recorded program that exec'd another (here after its first NCCL calls: the pid stays, its
// socket file and pointer file stay behind, nobody listens) is named as running but not
// listening, by pid and by run, instead of "does not answer" or "exited".
TEST(RunReuse, AProgramThatExecdIsNamedAsNotListening) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  const std::string xdg = tmp.file("xdg");
  PausedApp p = startPausedApp(run, xdg);
  ASSERT_GT(p.app, 0);
  struct KillAtEnd {  // the exec'd program, whatever the test's outcome
    pid_t pid;
    ~KillAtEnd() { ::kill(pid, SIGKILL); }
  } kill_at_end{p.app};
  ASSERT_EQ(p.rec->send("call 1"), "ok");
  const std::string attach = fmt::format("XDG_RUNTIME_DIR={} {} attach", xdg, detrace());
  testing::ShellOutput before;
  for (int i = 0; i < 50; ++i) {  // the pointer is written within 250 ms of the first call
    before = sh(fmt::format("{} {} status", attach, run));
    if (before.status == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(before.status, 0) << before.out;
  p.rec->say("exec-sleep");
  std::string name;
  for (int i = 0; i < 500 && name != "sleep"; ++i) {  // until /proc says sleep (10 s at most)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream comm(fmt::format("/proc/{}/comm", p.app));
    std::getline(comm, name);
  }
  ASSERT_EQ(name, "sleep") << "the program did not exec";
  const testing::ShellOutput by_run = sh(fmt::format("{} {} status", attach, run));
  EXPECT_EQ(by_run.status, 2) << by_run.out;
  EXPECT_NE(by_run.out.find(fmt::format("process(es) {} are running but do not answer", p.app)), std::string::npos)
      << by_run.out;
  const testing::ShellOutput by_pid = sh(fmt::format("{} {} status", attach, p.app));
  EXPECT_EQ(by_pid.status, 2) << by_pid.out;
  EXPECT_NE(by_pid.out.find("no detrace control socket that it listens on"), std::string::npos) << by_pid.out;
  EXPECT_EQ(by_pid.out.find("does not answer"), std::string::npos) << by_pid.out;
}

// A run directory whose unended recording runs on another host (a shared file system) is named
// as such: its pids mean nothing here.
TEST(RunReuse, AttachNamesARunOfAnotherHost) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  ASSERT_EQ(sh(fmt::format("{} record -o {} -- true", detrace(), run)).status, 0);
  auto m = db::readManifest(run);
  ASSERT_TRUE(m.isOk());
  m->host = "another-host-of-the-cluster";
  m->end_time_ns = 0;
  ASSERT_TRUE(db::writeManifest(run, *m).isOk());
  std::ofstream(fmt::format("{}/proc-{}.dtrace-control", run, ::getpid())) << "socket=/nonexistent.sock\n";
  const testing::ShellOutput out = sh(fmt::format("{} attach {} status", detrace(), run));
  EXPECT_EQ(out.status, 2) << out.out;
  EXPECT_NE(out.out.find("was made on host another-host-of-the-cluster, not on this one"), std::string::npos) << out.out;
}

// `detrace attach` given the pid of a detrace with no recorded process under it (here a `detrace
// record` whose command cleared its environment, as its command is between fork and exec for a
// moment) says what that process is instead of "not recorded by detrace".
TEST(RunReuse, AttachToADetraceWithoutARecordedCommandSaysSo) {
  TempDir tmp;
  testing::LineChild rec(detrace(), {"record", "-o", tmp.file("run"), "--", "env", "-i", "/bin/sh", "-c", "echo up; read x"},
                         environmentWithXdg(tmp.file("xdg")));
  ASSERT_EQ(rec.line(), "up");
  const testing::ShellOutput out = sh(fmt::format("{} attach {} status", detrace(), rec.pid()));
  EXPECT_EQ(out.status, 2) << out.out;
  EXPECT_NE(out.out.find("is a `detrace record` with no recorded command under it"), std::string::npos) << out.out;
  rec.say("x");
  (void)rec.wait();
}

}  // namespace
}  // namespace detrace
