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
// for them the exported dlsym, a few instructions of assembly, jumps to glibc's rather than
// calling it, and glibc sees the program's return address, not the tracer's. Only explicit handles, whose lookup does not depend
// on the caller, come through the code below. x86-64 only; elsewhere the tracer exports no dlsym.
#include "dlsym_hook.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "log.h"
#include "next_symbol.h"

namespace detrace::tracer {
namespace {

using DlsymFn = void* (*)(void*, const char*);

// A lookup that finds nothing, where glibc's dlsym itself could not be found (never on glibc).
void* noSymbol(void*, const char*) { return nullptr; }

}  // namespace
}  // namespace detrace::tracer

// Referenced by name from the assembly below: hidden, so those references bind inside this library.
extern "C" {
[[gnu::visibility("hidden"), gnu::used]] void* detrace_dlsym_real = nullptr;

// glibc's dlsym: the one after this library (GLIBC_2.34 and later, else the older version).
[[gnu::visibility("hidden"), gnu::used]] void* detrace_dlsym_init() {
  void* real = __atomic_load_n(&detrace_dlsym_real, __ATOMIC_ACQUIRE);
  if (real != nullptr) return real;
  real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (real == nullptr) real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
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

#if defined(__x86_64__)
// dlsym(handle, name): RTLD_DEFAULT (0) and RTLD_NEXT (-1) jump to glibc's with the caller's
// return address still on the stack; other handles go to detrace_dlsym_handle. glibc's is found
// on first use (the slow path keeps the stack aligned for the call).
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
dlsym:
  .cfi_startproc
  testq %rdi, %rdi
  je 1f
  cmpq $-1, %rdi
  je 1f
  jmp detrace_dlsym_handle
1:
  movq detrace_dlsym_real(%rip), %rax
  testq %rax, %rax
  jz 2f
  jmp *%rax
2:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call detrace_dlsym_init
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  jmp *%rax
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#endif

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
