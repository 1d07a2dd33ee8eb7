// The launcher behind `detrace record`. See launcher.h.
#include "detrace/tracer/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "detrace/base/scoped.h"
#include "detrace/base/version.h"
#include "detrace/db/run.h"
#include "detrace/db/schema.h"
#include "detrace/tracer/capture_policy.h"
#include "detrace/tracer/run_processes.h"

extern char** environ;

namespace fs = std::filesystem;

namespace detrace::tracer {
namespace {

inline void closeFd(int fd) { ::close(fd); }
using ScopedFd = ScopedResource<int, closeFd, -1>;

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

bool isExecutableFile(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The program to exec: a path as given, or the first match on $PATH (like a shell).
Result<std::string> resolveCommand(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (isExecutableFile(name)) return name;
    struct stat st {};
    if (::stat(name.c_str(), &st) != 0) {
      return makeError(ErrorCode::kNotFound, "{}: no such file ({})", name, std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return makeError(ErrorCode::kInvalidArgument, "{} is a directory, not a program", name);
    if (!S_ISREG(st.st_mode)) return makeError(ErrorCode::kInvalidArgument, "{} is not a regular file", name);
    return makeError(ErrorCode::kInvalidArgument, "{} is not executable by you (chmod +x {}, or run it "
                     "through its interpreter: -- python {})", name, name, name);
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (isExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return makeError(ErrorCode::kNotFound, "{}: command not found (searched $PATH)", name);
}

// Creates the run directory, or empties the traces of an existing one under --force.
// --force replaces a finished run, never one still being recorded: deleting a live process's
// trace (and its -wal, which holds everything committed since the last checkpoint) loses what it
// recorded, and its launcher would later write over the new run's manifest.
Status refuseLiveRun(const std::string& dir) {
  const std::vector<LiveRunProcess> live = liveProcessesOfRun(dir);
  if (live.empty()) return Status::ok();
  if (!live.front().other_host.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "{} was recorded on host {} and has not ended there; whether it still records "
                     "cannot be seen from here, so --force does not replace it. Record into another "
                     "directory, or, if nothing records into it any more, delete it by hand",
                     dir, live.front().other_host);
  }
  std::string who;
  for (const LiveRunProcess& p : live) {
    who += fmt::format("{}{} ({})", who.empty() ? "" : ", ", p.pid,
                       p.launcher ? "its detrace record" : p.other_user ? "another user's" : "recording");
  }
  return makeError(ErrorCode::kInvalidArgument,
                   "{} is still being recorded by process {}; --force replaces only a finished run. "
                   "Wait for it or end it (kill the detrace record), or record into another directory",
                   dir, who);
}

// Trace files that are not a run's own (a baseline copied in as baseline.dtrace) would be read as
// ranks of the new run; --force does not delete them either: they are named.
Status refuseForeignTraces(const std::string& dir) {
  std::string names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code kind;  // a folder named *.dtrace is no trace (Run::open leaves it out)
    if (entry.path().extension() == db::kTraceExtension && entry.is_regular_file(kind) && pidOfRunFile(name) < 0) {
      names += (names.empty() ? "" : ", ") + name;
    }
  }
  if (names.empty()) return Status::ok();
  return makeError(ErrorCode::kInvalidArgument,
                   "{} holds trace files that are not a recorded process's own ({}); every *{} file "
                   "of a run directory is read as one of its processes, so move them out or record "
                   "into another directory",
                   dir, names, db::kTraceExtension);
}

Status prepareRunDir(const std::string& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      return makeError(ErrorCode::kInvalidArgument, "{} exists and is not a directory; choose another -o", dir);
    }
    bool empty = fs::is_empty(dir, ec);
    if (!empty && !force) {
      return makeError(ErrorCode::kInvalidArgument,
                       "{} is not empty; record into a new directory, or pass --force to replace "
                       "the run in it",
                       dir);
    }
    if (!empty) {
      DETRACE_RETURN_IF_ERROR(refuseLiveRun(dir));
      DETRACE_RETURN_IF_ERROR(refuseForeignTraces(dir));
      // The run's own files only: a user's notes or notebooks beside the traces stay.
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::string name = entry.path().filename().string();
        if (pidOfRunFile(name) > 0 || name == db::kManifestName) fs::remove(entry.path(), ec);
      }
    }
  } else {
    if (fs::is_symlink(dir, ec)) {  // exists() follows it: a link to nothing
      return makeError(ErrorCode::kInvalidArgument,
                       "{} is a symbolic link to {}, which does not exist; create that directory or "
                       "choose another -o",
                       dir, fs::read_symlink(dir, ec).string());
    }
    fs::create_directories(dir, ec);
    if (ec) return makeError(ErrorCode::kIo, "cannot create {}: {}", dir, ec.message());
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return makeError(ErrorCode::kIo, "cannot write to {}: {}; choose a writable directory", dir,
                     std::strerror(errno));
  }
  return Status::ok();
}

// The program's environment without detrace's own variables (they are set again from the options),
// with the tracer put in front of any LD_PRELOAD the program already has.
std::vector<std::string> childEnvironment(const RecordOptions& options, const std::string& lib,
                                          const std::string& out_dir) {
  std::vector<std::string> env;
  std::string preload = lib;
  const std::vector<std::string> tracer_env = tracerEnvironment(options, lib, out_dir);
  // A variable set below must not also be passed on as it was: with two entries, getenv (NCCL's,
  // NVTX's, the tracer's) takes the first, the user's empty NCCL_PROFILER_PLUGIN= for example.
  auto setBelow = [&tracer_env](const std::string& key) {
    return std::any_of(tracer_env.begin(), tracer_env.end(), [&key](const std::string& kv) {
      return kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=';
    });
  };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (key == "LD_PRELOAD") {
      std::string old = kv.substr(key.size() + 1);
      if (!old.empty()) preload += ":" + old;
      continue;
    }
    if (isSetByRecord(key) || setBelow(key)) continue;  // tracerEnvironment sets it
    env.push_back(std::move(kv));
  }
  // Overhead diagnostics (bench_overhead --diag): DETRACE_DIAG_NO_PRELOAD=1 leaves the NCCL and
  // cuBLAS interposers out (CUPTI injection only).
  if (const char* d = std::getenv("DETRACE_DIAG_NO_PRELOAD"); d != nullptr && std::strcmp(d, "1") == 0) {
    preload = preload.size() > lib.size() ? preload.substr(lib.size() + 1) : std::string();
  }
  if (!preload.empty()) env.push_back("LD_PRELOAD=" + preload);
  env.insert(env.end(), tracer_env.begin(), tracer_env.end());
  return env;
}

std::map<std::string, std::string> recordedEnv() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    if (isRecordedEnvVar(key)) env[key] = kv.substr(eq + 1);
  }
  return env;
}

// ---- signal forwarding ----
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_session_leader = 0;  // detrace leads its session (ssh host detrace ...)
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
struct sigaction g_saved[std::size(kForwardedSignals)];  // detrace's own, while forwarding

// A signal sent to detrace with kill(2) goes on to the command. One the terminal sent (Ctrl-C)
// already reached the command, which shares detrace's process group, so it is not sent twice;
// but a hangup is sent to the session leader alone, so when that is detrace it goes on too.
void forwardSignal(int sig, siginfo_t* info, void*) {
  const bool from_terminal = info != nullptr && info->si_code == SI_KERNEL;
  if (g_child > 0 && (!from_terminal || (sig == SIGHUP && g_session_leader))) kill(g_child, sig);
}

class SignalForwarding {
 public:
  SignalForwarding() {
    struct sigaction sa{};
    sa.sa_sigaction = forwardSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    g_session_leader = getsid(0) == getpid();
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      sigaction(kForwardedSignals[i], nullptr, &g_saved[i]);
      // A signal detrace was started ignoring (nohup, `cmd &` in a script, trap '' TERM) stays
      // ignored: the command inherits SIG_IGN across exec, as it would without detrace (a caught
      // signal is reset to SIG_DFL by exec), and nothing is forwarded.
      if ((g_saved[i].sa_flags & SA_SIGINFO) == 0 && g_saved[i].sa_handler == SIG_IGN) continue;
      sigaction(kForwardedSignals[i], &sa, nullptr);
    }
  }
  ~SignalForwarding() {
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i) sigaction(kForwardedSignals[i], &g_saved[i], nullptr);
    g_child = 0;
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;
};

// Blocks the forwarded signals from fork until the child's pid is known (in detrace) and its
// dispositions are detrace's own again (in the child): one that comes meanwhile is forwarded once
// the pid is known, and acts on the child as it would on the command, never on detrace's handler
// with no child to forward to.
class ForkGuard {
 public:
  ForkGuard() {
    sigset_t block;
    sigemptyset(&block);
    for (int sig : kForwardedSignals) sigaddset(&block, sig);
    sigprocmask(SIG_BLOCK, &block, &old_);
  }
  void inChild() const {  // async-signal-safe calls only
    for (size_t i = 0; i < std::size(kForwardedSignals); ++i) sigaction(kForwardedSignals[i], &g_saved[i], nullptr);
    sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  ~ForkGuard() { sigprocmask(SIG_SETMASK, &old_, nullptr); }
  ForkGuard(const ForkGuard&) = delete;
  ForkGuard& operator=(const ForkGuard&) = delete;

 private:
  sigset_t old_;
};

// Starts the command; an exec failure in the child comes back through a close-on-exec pipe.
Result<pid_t> spawn(const std::string& program, const std::vector<std::string>& args,
                    const std::vector<std::string>& env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return makeError(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
  ScopedFd rd(fds[0]), wr(fds[1]);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // A script without a #! line runs under /bin/sh, as a shell and execvp(3) run it.
  std::vector<char*> sh_argv = {const_cast<char*>("sh"), const_cast<char*>(program.c_str())};
  sh_argv.insert(sh_argv.end(), argv.begin() + 1, argv.end());
  pid_t pid = 0;
  {
    ForkGuard guard;
    pid = fork();
    if (pid == 0) {
      guard.inChild();
      execve(program.c_str(), argv.data(), envp.data());
      if (errno == ENOEXEC) execve("/bin/sh", sh_argv.data(), envp.data());
      int err = errno;
      ssize_t ignored = write(wr.get(), &err, sizeof err);
      (void)ignored;
      _exit(127);
    }
    if (pid > 0) g_child = pid;  // before the guard goes: a signal held meanwhile is forwarded
  }
  if (pid < 0) return makeError(ErrorCode::kIo, "cannot start {}: fork: {}", program, std::strerror(errno));
  wr.reset();
  int err = 0;
  ssize_t n;
  do {
    n = read(rd.get(), &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof err) {
    waitpid(pid, nullptr, 0);
    g_child = 0;
    if (err == ENOENT) {  // resolveCommand found the file: what is missing is its interpreter
      return makeError(ErrorCode::kIo, "cannot run {}: the interpreter its #! line names (or its "
                       "ELF loader) does not exist", program);
    }
    return makeError(ErrorCode::kIo, "cannot run {}: {}", program, std::strerror(err));
  }
  return pid;
}

int waitForExit(pid_t pid, int* term_signal) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    *term_signal = WTERMSIG(status);
    return 128 + WTERMSIG(status);
  }
  return 127;
}

std::vector<std::string> traceFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == db::kTraceExtension) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool isRecordedEnvVar(const std::string& name) {
  if (name == "CUDA_INJECTION64_PATH") return false;
  for (const char* prefix : {"CUDA_", "NCCL_", "CUBLAS", "NVIDIA_", "TORCH_", "PYTORCH_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return name == "OMP_NUM_THREADS";
}

Result<std::string> findTracerLibrary() {
  if (const char* env = std::getenv("DETRACE_TRACER_LIB"); env && *env) {
    std::error_code ec;
    if (fs::exists(env, ec)) {
      fs::path absolute = fs::absolute(env, ec);
      if (!ec) return absolute.string();
    }
    return makeError(ErrorCode::kNotFound, "DETRACE_TRACER_LIB names {}, which {}", env,
                     ec ? "cannot be used: " + ec.message() : std::string("does not exist"));
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return makeError(ErrorCode::kNotFound, "cannot find this executable: {}", ec.message());
  fs::path dir = exe.parent_path();
  std::vector<fs::path> candidates = {dir / ".." / "tracer" / kTracerLibraryName,
                                      dir / ".." / "lib" / "detrace" / kTracerLibraryName,
                                      dir / kTracerLibraryName};
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec)) return fs::canonical(c, ec).string();
  }
  return makeError(ErrorCode::kNotFound,
                   "cannot find {} (looked in {}/../tracer, {}/../lib/detrace and {}); build the "
                   "tracer (it needs CUDA) or set DETRACE_TRACER_LIB",
                   kTracerLibraryName, dir.string(), dir.string(), dir.string());
}

Status checkCaptureOptions(const RecordOptions& options) {
  DETRACE_ASSIGN_OR_RETURN(CaptureLevel level, parseCaptureLevel(options.capture));
  bool full = level == CaptureLevel::kFull;
  if (options.max_capture_bytes && *options.max_capture_bytes <= 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--max-capture-bytes must be a positive size (e.g. 512M){}",
                     *options.max_capture_bytes == 0
                         ? ": 0 would copy nothing; for fingerprints alone use --capture digest"
                         : "");
  }
  if (!full && (!options.capture_ops.empty() || !options.capture_range.empty() ||
                options.max_capture_bytes)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--capture-ops, --capture-range and --max-capture-bytes choose what --capture "
                     "full copies; add --capture full");
  }
  if (!options.capture_ops.empty()) DETRACE_RETURN_IF_ERROR(parseOpFilter(options.capture_ops).status());
  DETRACE_RETURN_IF_ERROR(parseRowDigests(options.row_digests).status());
  DETRACE_RETURN_IF_ERROR(parseGraphWeightsEvery(std::to_string(options.graph_weights_every)).status());
  if (options.graph_weights_every > 1 && level == CaptureLevel::kMeta) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--graph-weights-every chooses which replays get weight digests: it needs "
                     "--capture digest (the default) or full");
  }
  if (options.graph_weights_every > 1 && options.row_digests == "all") {
    return makeError(ErrorCode::kInvalidArgument,
                     "--graph-weights-every samples the GEMM inputs that have no per-row digests; "
                     "with --row-digests all every weight has them and would still be digested at "
                     "every replay: drop one of the two options");
  }
  if (!options.capture_range.empty()) {
    if (auto r = parseIndexRange(options.capture_range); !r.isOk()) {
      return makeError(ErrorCode::kInvalidArgument, "--capture-range: {}", r.status().message());
    }
  }
  if (!options.window.empty()) {
    auto w = parseWindow(options.window);
    if (!w.isOk()) return makeError(ErrorCode::kInvalidArgument, "--window: {}", w.status().message());
    if (w->before > 0) {
      return makeError(ErrorCode::kInvalidArgument,
                       "--window {}: a recording window cannot look back; only --deep can (it "
                       "fingerprints the launches before the named one speculatively)",
                       options.window);
    }
  }
  if (!options.deep.empty()) {
    auto w = parseWindow(options.deep);
    if (!w.isOk()) return makeError(ErrorCode::kInvalidArgument, "--deep: {}", w.status().message());
    if (options.capture == "meta") {
      return makeError(ErrorCode::kInvalidArgument,
                       "--deep fingerprints memory: it needs --capture digest (the default) or full");
    }
    if (options.paused) {
      return makeError(ErrorCode::kInvalidArgument,
                       "--deep must track allocations from the program's start: it cannot be "
                       "combined with --paused");
    }
  }
  if (options.paused && !options.window.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--paused records nothing until `detrace attach RUN_DIR start`: give the window "
                     "there (detrace attach RUN_DIR start --window {}), counted from that start",
                     options.window);
  }
  return Status::ok();
}

bool isSetByRecord(std::string_view key) {
  static constexpr std::string_view kFromOptions[] = {
      "CUDA_INJECTION64_PATH",     "DETRACE_OUT_DIR",         "DETRACE_QUEUE",
      "DETRACE_CAPTURE",           "DETRACE_DIGEST",          "DETRACE_CAPTURE_OPS",
      "DETRACE_CAPTURE_RANGE",     "DETRACE_MAX_CAPTURE_BYTES", "DETRACE_WINDOW",
      "DETRACE_DEEP",              "DETRACE_PAUSED",          "DETRACE_LAUNCH_CALLBACKS",
      "DETRACE_ROW_DIGESTS",       "DETRACE_GRAPH_WEIGHTS_EVERY", "DETRACE_LAUNCHER_PID"};
  return std::find(std::begin(kFromOptions), std::end(kFromOptions), key) != std::end(kFromOptions);
}

std::vector<std::string> tracerEnvironment(const RecordOptions& options, const std::string& lib,
                                           const std::string& out_dir) {
  std::vector<std::string> env;
  // CUDA loads one injection library: another tool's (nsys, a profiler of your own) gives way.
  if (const char* own = std::getenv("CUDA_INJECTION64_PATH"); own && *own && lib != own) {
    std::fprintf(stderr,
                 "detrace: CUDA_INJECTION64_PATH=%s is set; CUDA loads one injection library, so "
                 "detrace's replaces it for the command\n",
                 own);
  }
  env.push_back("CUDA_INJECTION64_PATH=" + lib);
  // The same library is NCCL's profiler plugin: it is how NCCL's algorithm, protocol and channel
  // choices are recorded. NCCL loads one plugin only; a user's own plugin wins, with a warning.
  // (detrace's own library, as under a detrace record of a detrace record, is no user's plugin.)
  if (const char* own = std::getenv("NCCL_PROFILER_PLUGIN"); own && *own && lib != own) {
    std::fprintf(stderr,
                 "detrace: NCCL_PROFILER_PLUGIN=%s is set, so NCCL will not report its algorithm "
                 "and protocol to detrace; unset it to record them\n",
                 own);
  } else {
    env.push_back("NCCL_PROFILER_PLUGIN=" + lib);
  }
  // NVTX ranges (steps, layers) reach the tracer through CUPTI: NVTX loads the injection library
  // named here at its first call. The tracer is told to use the same CUPTI file.
  const char* own_nvtx = std::getenv("NVTX_INJECTION64_PATH");
  if (own_nvtx == nullptr || *own_nvtx == '\0') {
    const char* cupti = std::getenv("DETRACE_CUPTI_LIB");
    std::string path = cupti && *cupti ? cupti : DETRACE_CUPTI_DEFAULT_PATH;
    std::error_code ec;  // a name too long, a loop of links: CUPTI is not found there either
    if (!path.empty() && fs::exists(path, ec)) {
      env.push_back("NVTX_INJECTION64_PATH=" + path);
      if (!(cupti && *cupti)) env.push_back("DETRACE_CUPTI_LIB=" + path);
    }
  }
  env.push_back("DETRACE_OUT_DIR=" + out_dir);
  // The signals detrace forwards come from this pid: the command's tracer drops the copy of one
  // that reached the command directly (a process-group kill), signals.cc.
  env.push_back("DETRACE_LAUNCHER_PID=" + std::to_string(getpid()));
  if (options.queue > 0) env.push_back("DETRACE_QUEUE=" + std::to_string(options.queue));
  env.push_back("DETRACE_CAPTURE=" + options.capture);
  if (options.capture == "meta") env.push_back("DETRACE_DIGEST=0");
  if (!options.capture_ops.empty()) env.push_back("DETRACE_CAPTURE_OPS=" + options.capture_ops);
  if (!options.capture_range.empty()) env.push_back("DETRACE_CAPTURE_RANGE=" + options.capture_range);
  if (options.max_capture_bytes) {
    env.push_back("DETRACE_MAX_CAPTURE_BYTES=" + std::to_string(*options.max_capture_bytes));
  }
  if (!options.window.empty()) env.push_back("DETRACE_WINDOW=" + options.window);
  if (!options.deep.empty()) env.push_back("DETRACE_DEEP=" + options.deep);
  if (options.paused) env.push_back("DETRACE_PAUSED=1");  // dormant until `detrace attach ... start`
  if (options.launch_callbacks) env.push_back("DETRACE_LAUNCH_CALLBACKS=1");
  env.push_back("DETRACE_ROW_DIGESTS=" + options.row_digests);
  if (options.graph_weights_every > 1) {
    env.push_back("DETRACE_GRAPH_WEIGHTS_EVERY=" + std::to_string(options.graph_weights_every));
  }
  return env;
}

Result<RecordResult> record(const RecordOptions& options) {
  DETRACE_RETURN_IF_ERROR(checkCaptureOptions(options));
  if (options.command.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "nothing to record: put the command after --, e.g. detrace record -o run -- python app.py");
  }
  if (options.out_dir.empty()) {
    return makeError(ErrorCode::kInvalidArgument, "no run directory: pass -o RUN_DIR");
  }
  DETRACE_ASSIGN_OR_RETURN(std::string program, resolveCommand(options.command[0]));
  std::string lib = options.tracer_library;
  if (lib.empty()) {
    DETRACE_ASSIGN_OR_RETURN(lib, findTracerLibrary());
  }
  if (lib.find_first_of(" \t:") != std::string::npos) {  // ld.so splits LD_PRELOAD there
    return makeError(ErrorCode::kInvalidArgument,
                     "the tracer library's path ({}) holds a space or a colon, which LD_PRELOAD "
                     "cannot carry (NCCL and cuBLAS would go unrecorded); install or copy it to a "
                     "path without them and set DETRACE_TRACER_LIB", lib);
  }
  std::error_code ec;
  const bool existed = fs::exists(options.out_dir, ec);
  DETRACE_RETURN_IF_ERROR(prepareRunDir(options.out_dir, options.force));
  const fs::path absolute_dir = fs::absolute(options.out_dir, ec);
  if (ec) {  // the working directory is gone
    return makeError(ErrorCode::kIo, "cannot tell where {} is ({}); give -o an absolute path", options.out_dir,
                     ec.message());
  }
  std::string out_dir = absolute_dir.lexically_normal().string();

  db::RunManifest manifest;
  manifest.tool_version = kToolVersion;
  manifest.command = options.command;
  manifest.env = recordedEnv();
  manifest.host = hostName();
  manifest.start_time_ns = nowNs();
  manifest.launcher_pid = static_cast<int32_t>(::getpid());
  manifest.launcher_start_ticks = processStartTicks(::getpid());
  manifest.options = {{"force", options.force ? "true" : "false"},
                      {"queue", std::to_string(options.queue > 0 ? options.queue : kDefaultQueueEvents)},
                      {"capture", options.capture},
                      {"capture_ops", options.capture_ops},
                      {"capture_range", options.capture_range},
                      {"max_capture_bytes", std::to_string(options.max_capture_bytes.value_or(kDefaultMaxCaptureBytes))},
                      {"window", options.window},
                      {"deep", options.deep},
                      {"paused", options.paused ? "true" : "false"},
                      {"launch_callbacks", options.launch_callbacks ? "true" : "false"},
                      {"row_digests", options.row_digests},
                      {"graph_weights_every", std::to_string(options.graph_weights_every)},
                      {"tracer_library", lib}};
  DETRACE_RETURN_IF_ERROR(db::writeManifest(out_dir, manifest));

  RecordResult result;
  {
    SignalForwarding forwarding;
    Result<pid_t> pid = spawn(program, options.command, childEnvironment(options, lib, out_dir));
    if (!pid.isOk()) {
      // Nothing ran: leave RUN_DIR as it was, so that the same command line works once fixed
      // (a manifest left behind would make the next try "not empty" and `info` "no trace files").
      fs::remove(fs::path(out_dir) / db::kManifestName, ec);
      if (!existed) fs::remove(out_dir, ec);
      return pid.status();
    }
    result.exit_status = waitForExit(*pid, &result.term_signal);
  }
  manifest.exit_code = result.exit_status;
  manifest.term_signal = result.term_signal;
  manifest.end_time_ns = nowNs();
  // The command ran: its exit status is still owed, and its traces are whole without this.
  if (Status st = db::writeManifest(out_dir, manifest); !st.isOk()) {
    std::fprintf(stderr, "detrace: the manifest keeps the start's values (no exit status or end time): %s\n",
                 st.message().c_str());
  }
  result.trace_files = traceFiles(out_dir);
  return result;
}

}  // namespace detrace::tracer
