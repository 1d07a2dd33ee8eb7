#include "next_symbol.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "dlsym_hook.h"

namespace detrace::tracer {
namespace {

// Base address of this library, to skip our own definitions.
const void* selfBase() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&selfBase), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
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
  if (handle == nullptr) return nullptr;
  void* sym = realDlsym(handle, name);
  dlclose(handle);  // drops the reference NOLOAD took; the library stays loaded
  return isSelf(sym) ? nullptr : sym;
}

}  // namespace

void* nextSymbol(const char* name, const char* lib_hint) {
  void* sym = realDlsym(RTLD_NEXT, name);
  if (sym != nullptr && !isSelf(sym)) return sym;
  return lib_hint ? fromLoadedLibrary(name, lib_hint) : nullptr;
}

void* loadedSymbol(const char* name, const char* lib_hint) {
  void* sym = realDlsym(RTLD_DEFAULT, name);
  if (sym != nullptr && !isSelf(sym)) return sym;
  return nextSymbol(name, lib_hint);
}

bool isOwnSymbol(void* sym) { return isSelf(sym); }

void* ownSymbol(const char* name) {
  static void* const self = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&selfBase), &info) == 0 || info.dli_fname == nullptr) return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);  // kept: this library stays loaded
  }();
  if (self == nullptr) return nullptr;
  void* sym = realDlsym(self, name);
  return isSelf(sym) ? sym : nullptr;
}

}  // namespace detrace::tracer
