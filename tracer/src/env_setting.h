// envNumber: a whole-number setting from the environment, its problems logged once per read
// (env_number.h says what is taken).
#pragma once

#include <cstdlib>

#include "detrace/tracer/env_number.h"
#include "log.h"

namespace detrace::tracer {

inline int64_t envNumber(const char* name, int64_t fallback, int64_t min, int64_t max,
                         const char* fallback_text = nullptr) {
  const EnvNumber n = parseEnvNumber(name, std::getenv(name), fallback, min, max, fallback_text);
  if (!n.problem.empty()) logLine("ignoring a setting: %s", n.problem.c_str());
  return n.value;
}

}  // namespace detrace::tracer
