// dlsym as the program calls it. The NCCL and cuBLAS entry points the tracer wraps, looked up
// through a handle of their library (Python's ctypes does this: ctypes.CDLL, then getattr, as
// vLLM's and SGLang's pynccl call NCCL; so do programs that load cuBLAS themselves, as XLA does),
// are answered with the tracer's wrappers; everything else gets glibc's own answer.
//
// LD_PRELOAD puts the wrappers first in the global scope, where calls through a program's own
// links to NCCL and cuBLAS are resolved. dlsym(handle, name) looks only in the handle's object and
// its dependencies, so without this hook such calls would reach the library unseen (their kernels
// recorded, the collectives and GEMMs not).
//
// The special handles depend on who calls: RTLD_NEXT searches the objects after the caller's. So
// for them the exported dlsym, a few instructions of assembly (dlsym_trampoline.inc), jumps to
// glibc's rather than calling it, and glibc sees the program's return address, not the tracer's.
// Only explicit handles, whose lookup does not depend on the caller, come through the code below.
// x86-64 and aarch64 only; elsewhere the tracer exports no dlsym.
#include "dlsym_hook.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "dlsym_trampoline.inc"
#include "log.h"
#include "next_symbol.h"

namespace detrace::tracer {
namespace {

using DlsymFn = void* (*)(void*, const char*);

// A lookup that finds nothing, where glibc's dlsym itself could not be found (never on glibc).
void* noSymbol(void*, const char*) { return nullptr; }

}  // namespace
}  // namespace detrace::tracer

// Referenced by name from the assembly (dlsym_trampoline.inc, which declares them hidden).
extern "C" {
[[gnu::visibility("hidden"), gnu::used]] void* detrace_dlsym_real = nullptr;

// glibc's dlsym: the one after this library (GLIBC_2.34 and later, else the base version).
[[gnu::visibility("hidden"), gnu::used]] void* detrace_dlsym_init() {
  void* real = __atomic_load_n(&detrace_dlsym_real, __ATOMIC_ACQUIRE);
  if (real != nullptr) return real;
  real = detraceFindGlibcDlsym();
  if (real == nullptr) real = reinterpret_cast<void*>(&detrace::tracer::noSymbol);
  __atomic_store_n(&detrace_dlsym_real, real, __ATOMIC_RELEASE);
  return real;
}

[[gnu::visibility("hidden"), gnu::used]] void* detrace_dlsym_handle(void* handle, const char* name) {
  void* sym = reinterpret_cast<detrace::tracer::DlsymFn>(detrace_dlsym_init())(handle, name);
  if (sym == nullptr || name == nullptr || (name[0] != 'n' && name[0] != 'c')) return sym;
  return detrace::tracer::wrapperFor(name, sym);
}
}

namespace detrace::tracer {

void* realDlsym(void* handle, const char* name) {
  return reinterpret_cast<DlsymFn>(detrace_dlsym_init())(handle, name);
}

namespace {

// The library whose functions `name` names, as the wrappers look for it; nullptr for others.
const char* wrappedLibrary(const char* name) {
  if (std::strncmp(name, "nccl", 4) == 0) return kNcclLibrary;
  if (std::strncmp(name, "cublasLt", 8) == 0) return kCublasLtLibrary;
  if (std::strncmp(name, "cublas", 6) == 0) return kCublasLibrary;
  return nullptr;
}

}  // namespace

void* wrapperFor(const char* name, void* sym) noexcept {
  const char* library = wrappedLibrary(name);
  if (library == nullptr || std::strncmp(name, "ncclProfiler_", 13) == 0 || isOwnSymbol(sym)) return sym;
  void* wrapper = ownSymbol(name);
  if (wrapper == nullptr) return sym;  // a function the tracer does not wrap
  // The wrapper forwards to what nextSymbol finds (RealFn): hand it out only where that is the
  // very function the program asked for, never a second copy of the library's.
  if (nextSymbol(name, library) == sym) return wrapper;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    Dl_info info{};
    const char* where = dladdr(sym, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
    logLine("%s and the other calls looked up through dlsym in %s are not recorded: it is not the "
            "library the tracer forwards to (a second copy of it in the process)", name, where);
  }
  return sym;
}

}  // namespace detrace::tracer
