// A program that calls NCCL as Python's ctypes does (vLLM's and SGLang's pynccl): the library is
// dlopen()ed RTLD_LOCAL, never linked, and every function is looked up with dlsym on its handle.
// argv[1]: the NCCL library (the stand-in fake_nccl, so this runs anywhere). It also prints where
// dlsym(RTLD_NEXT, "ncclAllReduce") leads from here: the object after this program in the search
// order (the tracer's wrapper, when preloaded), which a dlsym that lost its caller would not give.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>

#include "dl_lookup.h"

namespace {


const char* objectOf(void* sym) {
  Dl_info info{};
  return sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "(none)";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* nccl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (nccl == nullptr) {
    std::fprintf(stderr, "dlopen_nccl_app: %s\n", dlerror());
    return 2;
  }
  auto get_id = lookup<decltype(&ncclGetUniqueId)>(nccl, "ncclGetUniqueId", "dlopen_nccl_app");
  auto init = lookup<decltype(&ncclCommInitRank)>(nccl, "ncclCommInitRank", "dlopen_nccl_app");
  auto all_reduce = lookup<decltype(&ncclAllReduce)>(nccl, "ncclAllReduce", "dlopen_nccl_app");
  auto destroy = lookup<decltype(&ncclCommDestroy)>(nccl, "ncclCommDestroy", "dlopen_nccl_app");
  if (get_id == nullptr || init == nullptr || all_reduce == nullptr || destroy == nullptr) return 3;
  std::printf("dlopen_nccl_app: ncclAllReduce through the handle: %s\n", objectOf(reinterpret_cast<void*>(all_reduce)));
  std::printf("dlopen_nccl_app: ncclAllReduce through RTLD_NEXT: %s\n", objectOf(dlsym(RTLD_NEXT, "ncclAllReduce")));
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (get_id(&id) != ncclSuccess || init(&comm, 4, id, 1) != ncclSuccess) return 4;
  auto* stream = reinterpret_cast<cudaStream_t>(0x1234);
  char buf[64];
  for (size_t count : {31, 37}) {
    if (all_reduce(buf, buf + 8, count, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) return 5;
  }
  if (destroy(comm) != ncclSuccess) return 6;
  std::printf("dlopen_nccl_app: done\n");
  return 0;
}
