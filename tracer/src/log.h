// Logging from inside the traced process: one line to stderr with a "detrace:" prefix. Never
// throws, never allocates on the heap (a fixed stack buffer), safe from any thread.
#pragma once

#include <cstdarg>
#include <cstdio>

namespace detrace::tracer {

[[gnu::format(printf, 1, 2)]] inline void logLine(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "detrace: %s\n", buf);
}

}  // namespace detrace::tracer
