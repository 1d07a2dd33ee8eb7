// Finding the real library functions behind the tracer's wrappers.
//
// dlsym(RTLD_NEXT) finds the next definition in the global scope, which is where a library linked
// by the program lives. Python extensions (torch) are dlopen()ed RTLD_LOCAL, so their NCCL and
// cuBLASLt are not in the global scope: then the loaded objects are searched for a file whose
// name contains `lib_hint` and the symbol is taken from it (dlopen with RTLD_NOLOAD, so nothing
// new is loaded). Definitions inside this library itself are never returned.
#pragma once

namespace detrace::tracer {

// Where the wrappers' real functions live (the lib_hint below): the start of the file's name.
inline constexpr const char* kNcclLibrary = "libnccl";
inline constexpr const char* kCublasLtLibrary = "libcublasLt";
inline constexpr const char* kCublasLibrary = "libcublas.";

// The next definition of `name` after this library, or nullptr.
void* nextSymbol(const char* name, const char* lib_hint);
// `name` from an already loaded library (any, then one whose file name contains lib_hint).
void* loadedSymbol(const char* name, const char* lib_hint);
// The device of the calling thread's current CUDA context (cuCtxGetDevice, where the driver is
// loaded), or -1 (none current, no driver).
int currentDevice() noexcept;
// Whether `sym` lies in this library.
bool isOwnSymbol(void* sym);
// This library's own exported definition of `name` (a wrapper), or nullptr.
void* ownSymbol(const char* name);

// Resolves once, thread-safely (a function-local static), and casts to the wrapper's type:
//   static auto real = nextFn<decltype(&ncclAllReduce)>("ncclAllReduce", "libnccl");
template <typename Fn>
Fn nextFn(const char* name, const char* lib_hint) {
  return reinterpret_cast<Fn>(nextSymbol(name, lib_hint));
}

}  // namespace detrace::tracer

#include <atomic>

namespace detrace::tracer {

// A real function resolved on first use (and again while it is not found); thread-safe.
template <typename Fn>
class RealFn {
 public:
  RealFn(const char* name, const char* lib_hint) : name_(name), hint_(lib_hint) {}
  Fn get() {
    void* p = ptr_.load(std::memory_order_acquire);
    if (p == nullptr) {
      p = nextSymbol(name_, hint_);
      ptr_.store(p, std::memory_order_release);
    }
    return reinterpret_cast<Fn>(p);
  }

 private:
  const char* name_;
  const char* hint_;
  std::atomic<void*> ptr_{nullptr};
};

}  // namespace detrace::tracer
