// The driver's version from /proc's text. See detrace/tracer/driver_version.h.
#include "detrace/tracer/driver_version.h"

#include <algorithm>

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
