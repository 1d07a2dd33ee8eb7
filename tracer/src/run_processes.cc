#include "detrace/tracer/run_processes.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "detrace/db/run.h"
#include "detrace/db/schema.h"
#include "detrace/tracer/control_protocol.h"

namespace fs = std::filesystem;

namespace detrace::tracer {

std::string hostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

bool processAlive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

int64_t processUid(pid_t pid) {
  struct stat st {};
  const std::string proc = "/proc/" + std::to_string(pid);
  return ::stat(proc.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_uid) : -1;
}

namespace {

// /proc/<pid>/stat's fields after the command name (which may hold spaces and parentheses):
// fields[0] is field 3 (the state).
std::vector<std::string> statFields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

int64_t toInt(const std::string& s) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() ? v : -1;
}

}  // namespace

int64_t processStartTicks(pid_t pid) {
  const std::vector<std::string> f = statFields(pid);
  return f.size() > 19 ? toInt(f[19]) : -1;  // field 22
}

std::map<std::string, std::string> processEnvironment(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::map<std::string, std::string> env;
  std::string kv;
  while (std::getline(in, kv, '\0')) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::vector<pid_t> childProcesses(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const int64_t child = toInt(entry.path().filename().string());
    if (child <= 0) continue;
    const std::vector<std::string> f = statFields(static_cast<pid_t>(child));
    if (f.size() > 1 && toInt(f[1]) == pid) children.push_back(static_cast<pid_t>(child));  // field 4
  }
  return children;
}

pid_t pidOfRunFile(std::string_view name) {
  if (name.rfind("proc-", 0) != 0) return -1;
  name.remove_prefix(5);
  const size_t digits = name.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string_view::npos || digits > 10) return -1;
  const std::string_view suffix = name.substr(digits);
  const std::string trace = db::kTraceExtension;
  for (const std::string& ok : {trace, trace + "-wal", trace + "-shm", trace + "-journal",
                                std::string(control::kPointerSuffix)}) {
    if (suffix == ok) {
      int64_t pid = toInt(std::string(name.substr(0, digits)));
      return pid > 0 && pid <= INT32_MAX ? static_cast<pid_t>(pid) : -1;
    }
  }
  return -1;
}

bool processRunning(pid_t pid) {
  if (!processAlive(pid)) return false;
  const std::vector<std::string> f = statFields(pid);
  return f.empty() || (f[0] != "Z" && f[0] != "X");  // unreadable: alive counts
}

namespace {

// The boot time (/proc/stat's btime), seconds since the epoch; -1 if unknown.
int64_t bootTime() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      int64_t t = -1;
      in >> t;
      return t;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return -1;
}

int64_t mtimeSeconds(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : -1;
}

// The run's launcher while its manifest has no end: by pid and start time where both were read,
// else by a start no later than the manifest's last change. A run recorded on another host cannot
// be checked from here: it counts as live.
std::optional<LiveRunProcess> liveLauncher(const std::string& dir) {
  auto m = db::readManifest(dir);
  if (!m.isOk() || m->end_time_ns != 0) return std::nullopt;
  if (!m->host.empty() && m->host != hostName()) {
    LiveRunProcess p;
    p.pid = m->launcher_pid;
    p.launcher = true;
    p.other_host = m->host;
    return p;
  }
  const pid_t pid = m->launcher_pid;
  if (pid <= 0 || !processRunning(pid)) return std::nullopt;
  const int64_t ticks = processStartTicks(pid);
  const bool same = ticks >= 0 && m->launcher_start_ticks >= 0
                        ? ticks == m->launcher_start_ticks
                        : mayHaveWritten(pid, mtimeSeconds(fs::path(dir) / db::kManifestName));
  if (!same) return std::nullopt;
  LiveRunProcess p;
  p.pid = pid;
  p.launcher = true;
  return p;
}

}  // namespace

bool mayHaveWritten(pid_t pid, int64_t mtime) {
  const int64_t ticks = processStartTicks(pid), boot = bootTime();
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (ticks < 0 || boot < 0 || hz <= 0 || mtime < 0) return true;  // unknown: it may have
  return boot + ticks / hz <= mtime + 2;  // 2 s: the clocks' granularity
}

std::vector<LiveRunProcess> liveProcessesOfRun(const std::string& dir) {
  std::vector<LiveRunProcess> live;
  if (std::optional<LiveRunProcess> launcher = liveLauncher(dir)) {
    live.push_back(*launcher);
    if (!launcher->other_host.empty()) return live;  // its pids mean nothing here
  }
  std::map<pid_t, int64_t> newest;  // pid -> its files' latest change
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (pid_t pid = pidOfRunFile(entry.path().filename().string()); pid > 0) {
      newest[pid] = std::max(newest.count(pid) ? newest[pid] : int64_t{-1}, mtimeSeconds(entry.path()));
    }
  }
  for (const auto& [pid, mtime] : newest) {
    if (!live.empty() && live.front().pid == pid) continue;
    // Gone, or its pid handed to a process that started after the files were last written.
    if (!processRunning(pid) || !mayHaveWritten(pid, mtime)) continue;
    const std::map<std::string, std::string> env = processEnvironment(pid);
    if (env.empty()) {  // unreadable (another user's, or /proc mounted hidepid): it may record here
      LiveRunProcess p;
      p.pid = pid;
      p.other_user = true;
      live.push_back(p);
      continue;
    }
    auto it = env.find("DETRACE_OUT_DIR");
    std::error_code same;
    if (it != env.end() && fs::equivalent(it->second, dir, same) && !same) {
      LiveRunProcess p;
      p.pid = pid;
      live.push_back(p);
    }
  }
  return live;
}

}  // namespace detrace::tracer
