#include "next_symbol.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "dlsym_hook.h"

namespace detrace::tracer {
namespace {

// A lookup of the tracer's own that leaves no error behind for the program's next dlerror():
// the program's own lookups (through the dlsym hook) succeeded, and those of a wrapper's first
// call are none of its business.
void* quietDlsym(void* handle, const char* name) {
  void* sym = realDlsym(handle, name);
  if (sym == nullptr) dlerror();
  return sym;
}

// Base address of this library, to skip our own definitions.
const void* selfBase() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&selfBase), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

// A handle of this library, for its own exported definitions.
void* selfHandle() {
  static void* const self = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&selfBase), &info) == 0 || info.dli_fname == nullptr) return static_cast<void*>(nullptr);
    void* handle = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);  // kept: this library stays loaded
    if (handle == nullptr) dlerror();
    return handle;
  }();
  return self;
}

// Both made while the library loads, on the loading thread: made at first use instead, a thread
// holding the static's guard would wait for the loader's lock inside dladdr or dlopen while a
// library constructor, holding that lock, looks up an NCCL or cuBLAS name and waits for the guard.
[[gnu::constructor]] void initSelf() {
  selfBase();
  selfHandle();
}

bool isSelf(void* sym) {
  Dl_info info{};
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fbase == selfBase();
}

struct Search {
  const char* hint;
  char path[4096];
  bool found;
};

int visit(dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Search*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr || name[0] == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  base = base ? base + 1 : name;
  if (std::strstr(base, s->hint) != base) return 0;
  std::strncpy(s->path, name, sizeof s->path - 1);
  s->path[sizeof s->path - 1] = '\0';
  s->found = true;
  return 1;
}

// The symbol from the first loaded object whose file name starts with `hint`.
void* fromLoadedLibrary(const char* name, const char* hint) {
  Search s{hint, {}, false};
  dl_iterate_phdr(visit, &s);  // no dlopen while iterating: it holds the loader lock
  if (!s.found) return nullptr;
  void* handle = dlopen(s.path, RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) {
    dlerror();
    return nullptr;
  }
  void* sym = quietDlsym(handle, name);
  dlclose(handle);  // drops the reference NOLOAD took; the library stays loaded
  return isSelf(sym) ? nullptr : sym;
}

}  // namespace

void* nextSymbol(const char* name, const char* lib_hint) {
  void* sym = quietDlsym(RTLD_NEXT, name);
  if (sym != nullptr && !isSelf(sym)) return sym;
  return lib_hint ? fromLoadedLibrary(name, lib_hint) : nullptr;
}

int currentDevice() noexcept {
  using CtxDevFn = int (*)(int*);
  static std::atomic<CtxDevFn> found{nullptr};  // kept once found: the driver may load later
  CtxDevFn fn = found.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<CtxDevFn>(loadedSymbol("cuCtxGetDevice", "libcuda.so"));
    if (fn == nullptr) return -1;
    found.store(fn, std::memory_order_release);
  }
  int dev = -1;
  return fn(&dev) == 0 ? dev : -1;
}

void* loadedSymbol(const char* name, const char* lib_hint) {
  void* sym = quietDlsym(RTLD_DEFAULT, name);
  if (sym != nullptr && !isSelf(sym)) return sym;
  return nextSymbol(name, lib_hint);
}

bool isOwnSymbol(void* sym) { return isSelf(sym); }

void* ownSymbol(const char* name) {
  void* self = selfHandle();
  if (self == nullptr) return nullptr;
  void* sym = quietDlsym(self, name);
  return isSelf(sym) ? sym : nullptr;
}

}  // namespace detrace::tracer
