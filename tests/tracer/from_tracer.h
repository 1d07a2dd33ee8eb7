/* For the preloaded fault shims (fail_event_record.c, race_sigaction.c): whether a call comes from
 * the tracer's library, by the code address it returns to. Needs _GNU_SOURCE before any include. */
#pragma once

#include <dlfcn.h>
#include <string.h>

static inline int fromTracer(const void* caller) {
  Dl_info info;
  return dladdr(caller, &info) != 0 && info.dli_fname != NULL &&
         strstr(info.dli_fname, "libdetrace_tracer") != NULL;
}
