// A program that loads cuBLAS itself and calls it through dlsym on its handle, as XLA's loader
// and Python's ctypes do. argv[1]: the cuBLAS library (the stand-in fake_cublas, so this runs
// anywhere), loaded RTLD_GLOBAL. One cublasSgemm_v2: m 3, n 5, k 7 on stream 0x1234.
#include <cublas_api.h>
#include <dlfcn.h>

#include <cstdio>

#include "dl_lookup.h"

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* blas = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (blas == nullptr) {
    std::fprintf(stderr, "dlopen_cublas_app: %s\n", dlerror());
    return 2;
  }
  auto create = lookup<decltype(&cublasCreate_v2)>(blas, "cublasCreate_v2", "dlopen_cublas_app");
  auto set_stream = lookup<decltype(&cublasSetStream_v2)>(blas, "cublasSetStream_v2", "dlopen_cublas_app");
  auto sgemm = lookup<decltype(&cublasSgemm_v2)>(blas, "cublasSgemm_v2", "dlopen_cublas_app");
  if (create == nullptr || set_stream == nullptr || sgemm == nullptr) return 3;
  Dl_info info{};
  std::printf("dlopen_cublas_app: cublasSgemm_v2 through the handle: %s\n",
              dladdr(reinterpret_cast<void*>(sgemm), &info) != 0 && info.dli_fname ? info.dli_fname : "(none)");
  cublasHandle_t h = nullptr;
  if (create(&h) != CUBLAS_STATUS_SUCCESS) return 4;
  if (set_stream(h, reinterpret_cast<cudaStream_t>(0x1234)) != CUBLAS_STATUS_SUCCESS) return 4;
  alignas(256) static float a[64], b[64], c[64];
  const float one = 1.0f, zero = 0.0f;
  if (sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 5, 7, &one, a, 3, b, 7, &zero, c, 3) != CUBLAS_STATUS_SUCCESS) return 5;
  std::printf("dlopen_cublas_app: done\n");
  return 0;
}
