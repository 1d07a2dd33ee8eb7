// Checks the dlsym trampoline (tracer/src/dlsym_trampoline.inc) with dlsym_trampoline_lib
// preloaded; argv[1] is a library to dlopen for lookups through an explicit handle (libm.so.6).
// Built natively and for aarch64 (run under qemu) by cpu_dlsym_trampoline_test.cc. Prints what
// each lookup found, then "dlsym_trampoline_app: ok" and exits 0, or each failed check and exits 1.
//
// The property that matters: dlsym(RTLD_NEXT, ...) called by this program searches the objects
// after this program, the preloaded library first, as if the library exported no dlsym. A
// trampoline that called glibc's dlsym instead of jumping to it would make the lookup start after
// the library: dlsym_trampoline_probe would not be found and "dlsym" would be libc's.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <dlfcn.h>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "dlsym_trampoline_app: FAILED: %s\n", what);
  ++failures;
}

const char* objectOf(void* sym) {
  Dl_info info{};
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname
                                                                                : "(none)";
}

bool from(void* sym, const char* object) { return std::strstr(objectOf(sym), object) != nullptr; }

// Whether `address` lies in this program.
bool inThisProgram(void* address) {
  Dl_info here{};
  Dl_info there{};
  return address != nullptr && dladdr(reinterpret_cast<void*>(&inThisProgram), &here) != 0 &&
         dladdr(address, &there) != 0 && here.dli_fbase == there.dli_fbase;
}

// The lookups each thread makes first, all at once, before the library has found glibc's dlsym.
struct FirstLookups {
  void* probe_next = nullptr;
  void* dlsym_next = nullptr;
  void* puts_next = nullptr;
  void* puts_default = nullptr;
};

constexpr const char* kLibrary = "libdlsym_trampoline";
constexpr const char* kLibc = "libc.so";

template <typename T>
T get(const char* name) {
  return reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;

  // (c) The first lookups of the process, from 8 threads at once: they meet in the slow path.
  std::vector<FirstLookups> first(8);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (FirstLookups& f : first) {
    threads.emplace_back([&f, &go] {
      while (!go.load()) std::this_thread::yield();
      f.probe_next = dlsym(RTLD_NEXT, "dlsym_trampoline_probe");
      f.dlsym_next = dlsym(RTLD_NEXT, "dlsym");
      f.puts_next = dlsym(RTLD_NEXT, "puts");
      f.puts_default = dlsym(RTLD_DEFAULT, "puts");
    });
  }
  go.store(true);
  for (std::thread& t : threads) t.join();

  auto handle_calls = get<int (*)()>("dlsym_trampoline_handle_calls");
  auto slow_inits = get<int (*)()>("dlsym_trampoline_slow_inits");
  auto versions = get<unsigned (*)()>("dlsym_trampoline_versions");
  auto unwound_to = get<void* (*)()>("dlsym_trampoline_unwound_to");
  if (handle_calls == nullptr || slow_inits == nullptr || versions == nullptr ||
      unwound_to == nullptr) {
    std::fprintf(stderr, "dlsym_trampoline_app: FAILED: libdlsym_trampoline.so is not preloaded\n");
    return 1;
  }
  for (const FirstLookups& f : first) {
    check(from(f.probe_next, kLibrary),
          "thread: RTLD_NEXT dlsym_trampoline_probe is the library's");
    check(from(f.dlsym_next, kLibrary), "thread: RTLD_NEXT dlsym is the library's");
    check(from(f.puts_next, kLibc), "thread: RTLD_NEXT puts is libc's");
    check(from(f.puts_default, kLibc), "thread: RTLD_DEFAULT puts is libc's");
  }
  std::printf("dlsym_trampoline_app: %zu threads' first lookups, %d through the slow path\n",
              first.size(), slow_inits());
  check(slow_inits() >= 1, "the first lookups went through the slow path");
  std::printf("dlsym_trampoline_app: unwound from the slow path to: %s\n", objectOf(unwound_to()));
  check(inThisProgram(unwound_to()), "the stack unwinds from the slow path to this program");
  check(handle_calls() == 0, "no special handle reached detrace_dlsym_handle");

  // (a) RTLD_NEXT from the program: the objects after it, the preloaded library first.
  void* probe = dlsym(RTLD_NEXT, "dlsym_trampoline_probe");
  void* next_dlsym = dlsym(RTLD_NEXT, "dlsym");
  void* next_puts = dlsym(RTLD_NEXT, "puts");
  std::printf("dlsym_trampoline_app: RTLD_NEXT dlsym_trampoline_probe: %s\n", objectOf(probe));
  std::printf("dlsym_trampoline_app: RTLD_NEXT dlsym: %s\n", objectOf(next_dlsym));
  std::printf("dlsym_trampoline_app: RTLD_NEXT puts: %s\n", objectOf(next_puts));
  check(from(probe, kLibrary), "RTLD_NEXT dlsym_trampoline_probe is the library's");
  check(probe != nullptr && reinterpret_cast<int (*)()>(probe)() == 42, "the probe answers 42");
  check(from(next_dlsym, kLibrary), "RTLD_NEXT dlsym is the library's");
  check(from(next_puts, kLibc), "RTLD_NEXT puts is libc's");
  dlerror();
  check(dlsym(RTLD_NEXT, "dlsym_trampoline_no_such_symbol") == nullptr && dlerror() != nullptr,
        "RTLD_NEXT of a missing symbol is null, with an error");

  // (b) RTLD_DEFAULT goes to glibc too; an explicit handle to detrace_dlsym_handle, once a call.
  check(from(dlsym(RTLD_DEFAULT, "puts"), kLibc), "RTLD_DEFAULT puts is libc's");
  check(from(dlsym(RTLD_DEFAULT, "dlsym_trampoline_probe"), kLibrary),
        "RTLD_DEFAULT dlsym_trampoline_probe is the library's");
  check(handle_calls() == 0, "RTLD_NEXT and RTLD_DEFAULT never reached detrace_dlsym_handle");
  void* libm = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (libm == nullptr) {
    std::fprintf(stderr, "dlsym_trampoline_app: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  auto cos_fn = reinterpret_cast<double (*)(double)>(dlsym(libm, "cos"));
  std::printf("dlsym_trampoline_app: cos through the handle: %s\n",
              objectOf(reinterpret_cast<void*>(cos_fn)));
  check(from(reinterpret_cast<void*>(cos_fn), "libm"), "cos through the handle is libm's");
  check(cos_fn != nullptr && cos_fn(0.0) == 1.0, "cos(0) is 1");
  dlerror();
  check(dlsym(libm, "dlsym_trampoline_no_such_symbol") == nullptr && dlerror() != nullptr,
        "a missing symbol through the handle is null, with an error");
  check(handle_calls() == 2, "both explicit-handle lookups reached detrace_dlsym_handle");

  // glibc's dlsym under the versions the tracer asks for: GLIBC_2.34 and this architecture's base.
  unsigned found = versions();
  std::printf("dlsym_trampoline_app: dlsym versions found: %#x\n", found);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  check((found & 1u) != 0, "dlsym@GLIBC_2.34 is found");
#endif
#if defined(__x86_64__)
  check((found & 2u) != 0, "dlsym@GLIBC_2.2.5 is found");
#elif defined(__aarch64__)
  check((found & 4u) != 0, "dlsym@GLIBC_2.17 is found");
#endif

  if (failures != 0) return 1;
  std::printf("dlsym_trampoline_app: ok\n");
  return 0;
}
