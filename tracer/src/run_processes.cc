#include "detrace/tracer/run_processes.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "detrace/db/run.h"
#include "detrace/db/schema.h"
#include "detrace/tracer/control_protocol.h"

namespace fs = std::filesystem;

namespace detrace::tracer {

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

std::vector<LiveRunProcess> liveProcessesOfRun(const std::string& dir) {
  std::vector<LiveRunProcess> live;
  if (auto m = db::readManifest(dir); m.isOk() && m->end_time_ns == 0 && m->launcher_pid > 0 &&
                                      processAlive(m->launcher_pid) &&
                                      processStartTicks(m->launcher_pid) == m->launcher_start_ticks) {
    live.push_back({m->launcher_pid, true, false});
  }
  std::set<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (pid_t pid = pidOfRunFile(entry.path().filename().string()); pid > 0) pids.insert(pid);
  }
  for (pid_t pid : pids) {
    if (!live.empty() && live.front().pid == pid) continue;
    if (!processAlive(pid)) continue;
    const int64_t uid = processUid(pid);
    if (uid >= 0 && uid != static_cast<int64_t>(::geteuid())) {
      live.push_back({pid, false, true});
      continue;
    }
    const std::map<std::string, std::string> env = processEnvironment(pid);
    auto it = env.find("DETRACE_OUT_DIR");
    std::error_code same;
    if (it != env.end() && fs::equivalent(it->second, dir, same) && !same) live.push_back({pid, false, false});
  }
  return live;
}

}  // namespace detrace::tracer
