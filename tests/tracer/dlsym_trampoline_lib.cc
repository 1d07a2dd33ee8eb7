// The tracer's dlsym trampoline alone (tracer/src/dlsym_trampoline.inc), in a library small enough
// to build for aarch64 too and run under qemu: preloaded into dlsym_trampoline_app, it exports
// dlsym as libdetrace_tracer.so does. Its detrace_dlsym_handle counts its calls and forwards them
// to glibc's; its detrace_dlsym_init finds glibc's dlsym as the tracer's does, but slowly, so that
// the first lookups of several threads meet in the trampoline's slow path, and it unwinds the
// stack from there, which only the trampoline's CFI lets reach the program.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <thread>

#include <execinfo.h>

#include "dlsym_trampoline.inc"

#if !DETRACE_DLSYM_TRAMPOLINE
#error "dlsym_trampoline.inc has no trampoline for this architecture"
#endif

namespace {

using DlsymFn = void* (*)(void*, const char*);

std::atomic<int> handle_calls{0};
std::atomic<int> slow_inits{0};
std::atomic<void*> unwound_to{nullptr};

// The first return address on this thread's stack outside this library.
void* firstCallerOutside() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&firstCallerOutside), &self) == 0) return nullptr;
  void* frames[16];
  int n = backtrace(frames, 16);
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    if (dladdr(frames[i], &info) != 0 && info.dli_fbase != self.dli_fbase) return frames[i];
  }
  return nullptr;
}

}  // namespace

extern "C" {

void* detrace_dlsym_real = nullptr;

void* detrace_dlsym_init() {
  void* real = __atomic_load_n(&detrace_dlsym_real, __ATOMIC_ACQUIRE);
  if (real != nullptr) return real;
  slow_inits.fetch_add(1);
  unwound_to.store(firstCallerOutside());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the other threads come in
  real = detraceFindGlibcDlsym();
  if (real == nullptr) {
    std::fputs("dlsym_trampoline_lib: glibc's dlsym not found\n", stderr);
    std::abort();
  }
  __atomic_store_n(&detrace_dlsym_real, real, __ATOMIC_RELEASE);
  return real;
}

void* detrace_dlsym_handle(void* handle, const char* name) {
  handle_calls.fetch_add(1);
  return reinterpret_cast<DlsymFn>(detrace_dlsym_init())(handle, name);
}

// Read by the program through dlsym(RTLD_DEFAULT, ...).
int dlsym_trampoline_handle_calls() { return handle_calls.load(); }
int dlsym_trampoline_slow_inits() { return slow_inits.load(); }
void* dlsym_trampoline_unwound_to() { return unwound_to.load(); }

// Defined here only: dlsym(RTLD_NEXT, ...) from the program finds it (this library comes next), a
// lookup glibc took to come from this library would not.
int dlsym_trampoline_probe() { return 42; }

// Which of kDetraceDlsymVersions dlvsym finds after this library, one bit each, in order.
unsigned dlsym_trampoline_versions() {
  unsigned found = 0;
  for (unsigned i = 0; i < std::size(kDetraceDlsymVersions); ++i) {
    if (dlvsym(RTLD_NEXT, "dlsym", kDetraceDlsymVersions[i]) != nullptr) found |= 1u << i;
  }
  return found;
}

}  // extern "C"
