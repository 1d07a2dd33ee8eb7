// A CUDA program the GPU attach test drives line by line on stdin (the GPU twin of control_app.cc).
// Each phase launches its own kernel, so the trace shows which phases were recorded. Commands,
// each answered with one line:
//   launch P N     N launches of kernel P (a..e), then a device synchronize   -> "ok"
//   time N         N launches of tiny_kernel in batches of 256 (fewer than the launch queue holds,
//                  so the GPU never throttles the loop); prints "ns <T>", T the time spent in the
//                  launch calls only (the CPU cost a tracer adds), synchronising between batches,
//                  and "cpu <C>", the calling thread's CPU time in those calls
//   gemm N         N cuBLASLt matmuls (64x64 fp32, the algorithm left to cuBLASLt), then a device
//                  synchronize -> "ok"
//   gemm-int N     N such matmuls, then raise(SIGINT) before the synchronize: the program's own
//                  handler (--own-sigint) runs while their kernels' records are still on their
//                  way -> "ok" (its handler ran) or "no sigint"
//   busy N MS      N launches of busy_kernel, each spinning MS ms on the GPU, not waited for
//                  -> "ok" (the kernels still run: a signal now finds the GPU busy)
//   reset-exit     cudaDeviceReset() then _exit(0): no atexit, only context teardown commits
//   exit           normal exit
// With --own-sigint the program installs a SIGINT handler of its own first (before its first
// CUDA call, so before the tracer's, which then chains to it).
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <unistd.h>

long long threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

__global__ void phase_a_kernel(int* x) { x[0] += 1; }
__global__ void phase_b_kernel(int* x) { x[0] += 2; }
__global__ void phase_c_kernel(int* x) { x[0] += 3; }
__global__ void phase_d_kernel(int* x) { x[0] += 4; }
__global__ void phase_e_kernel(int* x) { x[0] += 5; }
__global__ void tiny_kernel(int* x) { x[1] += 1; }

__device__ long long globalTimerNs() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` nanoseconds of the GPU's clock.
__global__ void busy_kernel(long long ns) {
  const long long start = globalTimerNs();
  while (globalTimerNs() - start < ns) {
  }
}

volatile sig_atomic_t g_sigint = 0;
void onSigint(int) { g_sigint = 1; }

// N matmuls D = A B of 64x64 fp32 matrices (A, B filled once with small integers); `raise_sigint`:
// a SIGINT raised before the synchronize.
bool gemms(int n, bool raise_sigint = false) {
  constexpr int kDim = 64;
  static cublasLtHandle_t handle = nullptr;
  static float* m = nullptr;  // A, B, D
  if (handle == nullptr) {
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) return false;
    if (cudaMalloc(&m, 3 * kDim * kDim * sizeof(float)) != cudaSuccess) return false;
    float host[2 * kDim * kDim];
    for (int i = 0; i < 2 * kDim * kDim; ++i) host[i] = static_cast<float>(i % 7);
    if (cudaMemcpy(m, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return false;
  }
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  bool ok = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, kDim, kDim, kDim) == CUBLAS_STATUS_SUCCESS;
  float alpha = 1, beta = 0;
  float *a = m, *b = m + kDim * kDim, *d = m + 2 * kDim * kDim;
  for (int i = 0; ok && i < n; ++i) {
    ok = cublasLtMatmul(handle, desc, &alpha, a, layout, b, layout, &beta, d, layout, d, layout,
                        nullptr, nullptr, 0, 0) == CUBLAS_STATUS_SUCCESS;
  }
  if (layout) cublasLtMatrixLayoutDestroy(layout);
  if (desc) cublasLtMatmulDescDestroy(desc);
  if (raise_sigint) raise(SIGINT);
  return ok && cudaDeviceSynchronize() == cudaSuccess;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--own-sigint") == 0) {
    struct sigaction sa {};
    sa.sa_handler = onSigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
  }
  int* x = nullptr;
  if (cudaMalloc(&x, 2 * sizeof(int)) != cudaSuccess) {
    std::printf("cuda init failed\n");
    return 1;
  }
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  std::string cmd;
  while (std::cin >> cmd) {
    if (cmd == "launch") {
      char phase = 'a';
      int n = 0;
      std::cin >> phase >> n;
      for (int i = 0; i < n; ++i) {
        switch (phase) {
          case 'a':
            phase_a_kernel<<<1, 1>>>(x);
            break;
          case 'b':
            phase_b_kernel<<<1, 1>>>(x);
            break;
          case 'c':
            phase_c_kernel<<<1, 1>>>(x);
            break;
          case 'd':
            phase_d_kernel<<<1, 1>>>(x);
            break;
          default:
            phase_e_kernel<<<1, 1>>>(x);
            break;
        }
      }
      std::printf(cudaDeviceSynchronize() == cudaSuccess ? "ok\n" : "failed\n");
    } else if (cmd == "time") {
      int n = 0;
      std::cin >> n;
      std::chrono::nanoseconds total{0};
      long long cpu = 0;
      for (int done = 0; done < n; done += 256) {
        auto t0 = std::chrono::steady_clock::now();
        long long c0 = threadCpuNs();
        for (int i = 0; i < 256 && done + i < n; ++i) tiny_kernel<<<1, 1>>>(x);
        cpu += threadCpuNs() - c0;
        total += std::chrono::steady_clock::now() - t0;
        cudaDeviceSynchronize();
      }
      std::printf("ns %lld cpu %lld\n", static_cast<long long>(total.count()), cpu);
    } else if (cmd == "gemm") {
      int n = 0;
      std::cin >> n;
      std::printf(gemms(n) ? "ok\n" : "failed\n");
    } else if (cmd == "gemm-int") {
      int n = 0;
      std::cin >> n;
      g_sigint = 0;
      const bool ok = gemms(n, /*raise_sigint=*/true);
      std::printf(!ok ? "failed\n" : g_sigint ? "ok\n" : "no sigint\n");
    } else if (cmd == "busy") {
      int n = 0, ms = 0;
      std::cin >> n >> ms;
      for (int i = 0; i < n; ++i) busy_kernel<<<1, 1>>>(static_cast<long long>(ms) * 1000000);
      std::printf(cudaGetLastError() == cudaSuccess ? "ok\n" : "failed\n");
    } else if (cmd == "reset-exit") {
      cudaDeviceReset();
      _exit(0);
    } else if (cmd == "exit") {
      break;
    } else {
      std::printf("unknown command\n");
    }
    std::fflush(stdout);
  }
  cudaFree(x);
  return 0;
}
