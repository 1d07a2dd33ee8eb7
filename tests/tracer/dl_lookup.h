// A lookup through dlsym as dlsym(3) tells callers to make it, for the test programs that call a
// library through its handle (dlopen_nccl_app, dlopen_cublas_app): clear dlerror(), look up, and
// take any error dlerror() then reports as the lookup's failure, even with a pointer in hand.
#pragma once

#include <dlfcn.h>

#include <cstdio>

template <typename Fn>
Fn lookup(void* handle, const char* name, const char* program) {
  dlerror();
  void* sym = dlsym(handle, name);
  if (const char* error = dlerror()) {
    std::fprintf(stderr, "%s: dlsym(%s): %s\n", program, name, error);
    return nullptr;
  }
  return reinterpret_cast<Fn>(sym);
}
