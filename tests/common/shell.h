// Runs a shell command line for end-to-end tests (`detrace record`, `detrace diff`, ...): its exit
// status and its output, stdout and stderr together unless the command redirects them itself.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace detrace::testing {

struct ShellOutput {
  int status = -1;  // exit status; -1 if it did not exit normally
  std::string out;
};

inline ShellOutput runShell(const std::string& cmd, bool with_stderr = true) {
  std::FILE* p = popen((with_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
  ShellOutput o;
  if (p == nullptr) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  int status = pclose(p);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

// The detrace executable of this build.
inline std::string detraceExe() { return std::string(DETRACE_BINARY_DIR) + "/replay/detrace"; }

}  // namespace detrace::testing
