// The driver's version from /proc's or sysfs's text, and the reading of such small files. See
// detrace/tracer/driver_version.h.
#include "detrace/tracer/driver_version.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace detrace::tracer {
namespace {

bool isVersion(std::string_view w) {
  if (w.empty() || w.front() == '.' || w.back() == '.') return false;
  bool dot = false;
  for (char c : w) {
    if (c == '.') {
      dot = true;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dot;
}

}  // namespace

std::string readSmallFile(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  while (out.size() < 65536) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string driverVersionFromSysfs(std::string_view text) {
  const size_t end = text.find_last_not_of(" \t\n");
  if (end == std::string_view::npos) return "";
  text = text.substr(0, end + 1);
  return isVersion(text) ? std::string(text) : "";
}

std::string driverVersionFromFiles(const std::string& proc, const std::string& sysfs) {
  if (std::string v = driverVersionFromProc(readSmallFile(proc.c_str())); !v.empty()) return v;
  return driverVersionFromSysfs(readSmallFile(sysfs.c_str()));
}

std::string driverVersionFromProc(std::string_view text) {
  text = text.substr(0, text.find('\n'));  // the NVRM line: the GCC line has versions too
  const size_t module = text.find("Module");
  if (module == std::string_view::npos) return "";
  std::string_view rest = text.substr(module);
  for (;;) {
    const size_t start = rest.find_first_not_of(" \t");
    if (start == std::string_view::npos) return "";
    rest = rest.substr(start);
    const size_t end = std::min(rest.find_first_of(" \t"), rest.size());
    if (isVersion(rest.substr(0, end))) return std::string(rest.substr(0, end));
    rest = rest.substr(end);
  }
}

}  // namespace detrace::tracer
