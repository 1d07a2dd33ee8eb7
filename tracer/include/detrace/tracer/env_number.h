// A whole-number setting read from the environment (DETRACE_REORDER_TIMEOUT_MS and the like): the
// recorded program's environment is the user's, so a value that is not a whole number, or is out
// of the setting's range, is named in a log line and replaced (not a number, or 0 or less where
// the range is positive: the default; else out of range: the nearest bound), never taken as it came (a huge value multiplied into nanoseconds
// overflowed before) nor ignored without a word. Plain logic over standard types, so that CPU
// tests can check it; the tracer logs `problem` (envNumber in tracer/src/env_setting.h).
#pragma once

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace detrace::tracer {

struct EnvNumber {
  int64_t value = 0;
  std::string problem;  // empty: the value was taken as given (or the setting was unset)
};

// `text`: the variable's value (nullptr or empty: unset, `fallback`). `fallback_text` names the
// fallback in the log line where its number would not say it (e.g. "an automatic size" for 0).
inline EnvNumber parseEnvNumber(const char* name, const char* text, int64_t fallback, int64_t min, int64_t max,
                                const char* fallback_text = nullptr) {
  EnvNumber out{fallback, {}};
  if (text == nullptr || *text == '\0') return out;
  const std::string using_fallback = fallback_text != nullptr ? fallback_text : std::to_string(fallback);
  const std::string range = std::to_string(min) + " to " + std::to_string(max);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0') {
    out.problem = std::string(name) + "=" + text + " is not a whole number (" + range + "); using " + using_fallback;
    return out;
  }
  const bool overflowed = errno == ERANGE;
  if (min >= 1 && (overflowed ? x == LLONG_MIN : x <= 0)) {  // 0 or less where a positive one is asked: unset
    out.problem = std::string(name) + "=" + text + " is not a positive number (" + range + "); using " + using_fallback;
    return out;
  }
  if (overflowed || x < min || x > max) {
    out.value = (overflowed ? x == LLONG_MIN : x < min) ? min : max;
    out.problem = std::string(name) + "=" + text + " is outside " + range + "; using " + std::to_string(out.value);
    return out;
  }
  out.value = x;
  return out;
}

}  // namespace detrace::tracer
