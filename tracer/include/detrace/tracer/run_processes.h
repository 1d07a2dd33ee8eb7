// The processes behind a run directory, as other processes see them through /proc: which of a
// run's files are its own (proc-<pid>.dtrace and its SQLite and control side files), and which of
// its processes still run. `detrace record --force` refuses to replace a run that is still being
// recorded and removes only the run's own files; `detrace attach` tells a process of another user
// from an exited one, and finds the run of a `detrace record` launcher's pid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace detrace::tracer {

// This machine's host name, as manifests record it.
std::string hostName();
// Whether `pid` exists (ours or another user's; a zombie too).
bool processAlive(pid_t pid);
// Whether `pid` exists and has not ended (not a zombie waiting for its parent).
bool processRunning(pid_t pid);
// Whether process `pid` may have written a file last changed at `mtime` (seconds since the
// epoch): it started no later (2 s of slack). False means its pid was handed out again since;
// true where its start cannot be read.
bool mayHaveWritten(pid_t pid, int64_t mtime);
// The owner of /proc/<pid>, or -1 when it cannot be read (the process has gone).
int64_t processUid(pid_t pid);
// The process's start time in clock ticks since boot (/proc/<pid>/stat, field 22), -1 when it
// cannot be read: with the pid, it names one process even after the pid is handed out again.
int64_t processStartTicks(pid_t pid);
// The initial environment of a process of ours (/proc/<pid>/environ); empty when unreadable.
std::map<std::string, std::string> processEnvironment(pid_t pid);
// The processes whose parent is `pid` (from /proc/*/stat).
std::vector<pid_t> childProcesses(pid_t pid);

// The pid in the name of one of a run's own files: proc-<pid>.dtrace and its side files
// (-wal, -shm, -journal, -control); -1 for any other name (the user's own files stay).
pid_t pidOfRunFile(std::string_view file_name);

// A process that is still recording into a run directory.
struct LiveRunProcess {
  pid_t pid = 0;
  bool launcher = false;    // the run's `detrace record`, by the manifest's pid and start time
  bool other_user = false;  // its environment cannot be read (another user's, or /proc mounted
                            // hidepid): whether it records here is unknown, and it counts as live
  std::string other_host;   // the run was recorded on this other host and has not ended: its
                            // processes cannot be seen from here, and it counts as live
};
// The run's processes still running: its launcher while its manifest has no end, and any process
// named by one of the run's files that started before they were last written and whose
// environment says it records into `dir` (a recorded program outlives a killed launcher).
std::vector<LiveRunProcess> liveProcessesOfRun(const std::string& dir);

}  // namespace detrace::tracer
