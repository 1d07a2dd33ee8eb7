/* A program thread that installs its own SIGINT handler in the middle of the tracer's install,
 * made deterministic at the libc seam for the signal tests (cpu_attach_signal_test.cc).
 * Preloaded after the tracer, this sigaction is the one the tracer calls. The first time the tracer
 * reads SIGINT's action (a query: no new action), this handler is installed right after the read,
 * as if another thread of the program had set it between the tracer's read and its write; the
 * tracer gets the action as it was before. The handler writes "raced sigint" to stdout. Every call
 * goes to libc's sigaction. */
#define _GNU_SOURCE
#include "from_tracer.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

typedef int (*Sigaction)(int, const struct sigaction*, struct sigaction*);

static atomic_bool g_raced;

static void onSigint(int sig) {
  (void)sig;
  static const char line[] = "raced sigint\n";
  (void)!write(1, line, sizeof line - 1);
}

int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  static _Atomic(Sigaction) real;
  Sigaction f = atomic_load(&real);
  if (f == NULL) {
    f = (Sigaction)dlsym(RTLD_NEXT, "sigaction");
    atomic_store(&real, f);
  }
  const int rc = f(sig, act, old);
  if (rc == 0 && sig == SIGINT && act == NULL && old != NULL &&
      fromTracer(__builtin_return_address(0)) && !atomic_exchange(&g_raced, 1)) {
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = onSigint;
    sigemptyset(&mine.sa_mask);
    (void)f(SIGINT, &mine, NULL);
  }
  return rc;
}
