/* A fault at the CUDA driver seam, for the GPU test of the fingerprinter's driver errors
 * (gpu_record_test.cc): preloaded beside the tracer, this cuEventRecord is what the tracer finds
 * (it looks the driver's entry points up with RTLD_DEFAULT). Calls made from libdetrace_tracer.so
 * are counted, and the one numbered DETRACE_TEST_FAIL_EVENT_RECORD_AT (from 1) fails with
 * CUDA_ERROR_UNKNOWN without recording anything, as a driver error would; every other call, and
 * every call from elsewhere, goes to the real driver. The program's CUDA runtime takes its entry
 * points from the driver itself, never through this symbol. */
#define _GNU_SOURCE
#include "from_tracer.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef CUresult (*EventRecord)(void*, void*);
enum { kUnknown = 999 };

static atomic_int g_calls;

static EventRecord realEventRecord(void) {
  static _Atomic(EventRecord) real;
  EventRecord f = atomic_load(&real);
  if (f == NULL) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    f = cuda != NULL ? (EventRecord)dlsym(cuda, "cuEventRecord") : NULL;
    atomic_store(&real, f);
  }
  return f;
}

CUresult cuEventRecord(void* event, void* stream) {
  if (fromTracer(__builtin_return_address(0))) {
    const int n = atomic_fetch_add(&g_calls, 1) + 1;
    const char* at = getenv("DETRACE_TEST_FAIL_EVENT_RECORD_AT");
    if (at != NULL && n == atoi(at)) {
      fprintf(stderr, "fail_event_record: the tracer's cuEventRecord number %d fails\n", n);
      return kUnknown;
    }
  }
  EventRecord real = realEventRecord();
  return real != NULL ? real(event, stream) : kUnknown;
}
