// `tracer_gpu_app lt-epilogue`: bf16 cuBLASLt matmuls D = A B (+ bias, GeLU) with epilogues, for
// gpu_capture_test.cc's check that each is recorded with its epilogue and that the bias the
// epilogue reads and the GeLU input it writes (aux) are operands whose copies and digests are
// right. As PyTorch's Linear calls it (TN): A is stored k x m and transposed, B is k x n, D m x n,
// all column-major; the bias has m elements; the aux is D's shape, EPILOGUE_AUX_LD = m. Values: lt_epilogue_values.h. The program prints nothing the test
// depends on.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <vector>

#include "lt_epilogue_values.h"

namespace lt_epilogue_app {

#define LE_CK(call)                                                                              \
  do {                                                                                           \
    auto e_ = (call);                                                                            \
    if (static_cast<int>(e_) != 0) {                                                             \
      std::fprintf(stderr, "tracer_gpu_app lt-epilogue: %s failed (%d)\n", #call, static_cast<int>(e_)); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

template <typename Fill>
int upload(void** dev, size_t n, Fill fill) {
  std::vector<uint16_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = fill(static_cast<int>(i));
  LE_CK(cudaMalloc(dev, n * 2));
  LE_CK(cudaMemcpy(*dev, host.data(), n * 2, cudaMemcpyHostToDevice));
  return 0;
}

inline int ltEpilogueMain() {
  namespace v = lt_epilogue_values;
  cudaStream_t s = nullptr;
  LE_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *A = nullptr, *B = nullptr, *bias = nullptr, *D = nullptr, *aux = nullptr, *ws = nullptr;
  if (upload(&A, size_t(v::kM) * v::kK, v::aValue) != 0 || upload(&B, size_t(v::kK) * v::kN, v::bValue) != 0 ||
      upload(&bias, v::kM, v::biasValue) != 0) {
    return 1;
  }
  LE_CK(cudaMalloc(&D, size_t(v::kM) * v::kN * 2));
  LE_CK(cudaMalloc(&aux, size_t(v::kM) * v::kN * 2));
  const size_t ws_bytes = 4u << 20;
  LE_CK(cudaMalloc(&ws, ws_bytes));
  cublasLtHandle_t lt = nullptr;
  LE_CK(cublasLtCreate(&lt));
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  LE_CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, v::kK, v::kM, v::kK));
  LE_CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, v::kK, v::kN, v::kK));
  LE_CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, v::kM, v::kN, v::kM));
  // One descriptor for the bias epilogues, as a program reusing one would; the last call, without
  // an epilogue, gets a descriptor of its own (cuBLASLt refuses a default epilogue with the bias
  // pointer set: lt_epilogue_values.h).
  cublasLtMatmulDesc_t desc = nullptr, plain = nullptr;
  LE_CK(cublasLtMatmulDescCreate(&plain, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LE_CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t trans_a = CUBLAS_OP_T;
  LE_CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  LE_CK(cublasLtMatmulDescSetAttribute(plain, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  const cudaDataType_t bias_type = CUDA_R_16BF;
  LE_CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
  LE_CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  LE_CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  const int64_t aux_ld = v::kM;
  LE_CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  const float alpha = 1.0f, beta = 0.0f;
  for (size_t call = 0; call < std::size(v::kEpilogues); ++call) {
    const int32_t e = v::kEpilogues[call];
    cublasLtMatmulDesc_t d = call < v::kWithBias ? desc : plain;
    const cublasLtEpilogue_t epilogue = static_cast<cublasLtEpilogue_t>(e);
    LE_CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    const cublasStatus_t st = cublasLtMatmul(lt, d, &alpha, A, la, B, lb, &beta, D, ld, D, ld, nullptr, ws, ws_bytes, s);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "tracer_gpu_app lt-epilogue: cublasLtMatmul with epilogue %d failed (%d)\n", e, int(st));
      return 1;
    }
  }
  LE_CK(cudaStreamSynchronize(s));
  LE_CK(cublasLtMatmulDescDestroy(desc));
  LE_CK(cublasLtMatmulDescDestroy(plain));
  LE_CK(cublasLtMatrixLayoutDestroy(la));
  LE_CK(cublasLtMatrixLayoutDestroy(lb));
  LE_CK(cublasLtMatrixLayoutDestroy(ld));
  LE_CK(cublasLtDestroy(lt));
  for (void* p : {A, B, bias, D, aux, ws}) LE_CK(cudaFree(p));
  LE_CK(cudaStreamDestroy(s));
  std::printf("tracer_gpu_app lt-epilogue: done\n");
  return 0;
}

#undef LE_CK

}  // namespace lt_epilogue_app
