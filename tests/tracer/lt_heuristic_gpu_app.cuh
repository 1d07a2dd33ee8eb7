// `tracer_gpu_app lt-heuristic`: cuBLASLt matmuls in pairs, for gpu_record_test.cc's check that a
// matmul called without an algorithm is recorded with the algorithm cuBLASLt ran. Each pair is one
// problem called twice on one stream: first with no algorithm (cuBLASLt picks one; the tracer
// records what its own heuristic query answers), then with the first answer of the program's own
// heuristic query for the same problem and workspace. The problems differ in what the heuristic
// weighs: a long K with and without a workspace (split-K needs one), a decode-like bf16 row, and a
// small fp32 square. The program prints nothing the test depends on.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lt_heuristic_app {

#define LT_CK(call)                                                                              \
  do {                                                                                           \
    auto e_ = (call);                                                                            \
    if (static_cast<int>(e_) != 0) {                                                             \
      std::fprintf(stderr, "tracer_gpu_app lt-heuristic: %s failed (%d)\n", #call, static_cast<int>(e_)); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

struct Problem {
  int m, n, k;
  cudaDataType_t type;  // A, B and D; the scale and compute types are fp32
  size_t workspace;     // bytes given to both calls and to the program's heuristic query
};

// The problems of the pairs, in order (gpu_record_test.cc walks the GEMMs in pairs).
inline constexpr Problem kProblems[] = {
    {64, 64, 16384, CUDA_R_32F, 32u << 20},
    {64, 64, 16384, CUDA_R_32F, 0},
    {4096, 1, 4096, CUDA_R_16BF, 32u << 20},
    {256, 128, 64, CUDA_R_32F, 4u << 20},
};

inline size_t elementBytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// One pair: the matmul without an algorithm, then with the heuristic's first answer.
inline int runPair(cublasLtHandle_t lt, const Problem& p, cudaStream_t s, void* ws) {
  const size_t e = elementBytes(p.type);
  void *A = nullptr, *B = nullptr, *D = nullptr;
  LT_CK(cudaMalloc(&A, size_t(p.m) * p.k * e));
  LT_CK(cudaMalloc(&B, size_t(p.k) * p.n * e));
  LT_CK(cudaMalloc(&D, size_t(p.m) * p.n * e));
  // Small positive values (0x3c bytes), neither NaN nor infinite in fp32 or bf16.
  LT_CK(cudaMemsetAsync(A, 0x3c, size_t(p.m) * p.k * e, s));
  LT_CK(cudaMemsetAsync(B, 0x3c, size_t(p.k) * p.n * e, s));
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_CK(cublasLtMatrixLayoutCreate(&la, p.type, p.m, p.k, p.m));
  LT_CK(cublasLtMatrixLayoutCreate(&lb, p.type, p.k, p.n, p.k));
  LT_CK(cublasLtMatrixLayoutCreate(&ld, p.type, p.m, p.n, p.m));
  float alpha = 1.0f, beta = 0.0f;
  void* w = p.workspace ? ws : nullptr;
  LT_CK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, nullptr, w, p.workspace, s));
  LT_CK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = p.workspace;
  LT_CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  LT_CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found));
  if (found < 1) return 1;
  LT_CK(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo, w, p.workspace, s));
  LT_CK(cudaStreamSynchronize(s));
  LT_CK(cublasLtMatmulPreferenceDestroy(pref));
  LT_CK(cublasLtMatrixLayoutDestroy(la));
  LT_CK(cublasLtMatrixLayoutDestroy(lb));
  LT_CK(cublasLtMatrixLayoutDestroy(ld));
  LT_CK(cublasLtMatmulDescDestroy(desc));
  LT_CK(cudaFree(A));
  LT_CK(cudaFree(B));
  LT_CK(cudaFree(D));
  return 0;
}

inline int ltHeuristicMain() {
  cudaStream_t s = nullptr;
  LT_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* ws = nullptr;
  LT_CK(cudaMalloc(&ws, 32u << 20));
  cublasLtHandle_t lt = nullptr;
  LT_CK(cublasLtCreate(&lt));
  for (const Problem& p : kProblems) {
    if (runPair(lt, p, s, ws) != 0) return 1;
  }
  LT_CK(cublasLtDestroy(lt));
  LT_CK(cudaFree(ws));
  LT_CK(cudaStreamDestroy(s));
  std::printf("tracer_gpu_app lt-heuristic: done\n");
  return 0;
}

#undef LT_CK

}  // namespace lt_heuristic_app
