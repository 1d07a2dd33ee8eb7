// A program that calls cuBLAS and cuBLASLt GEMMs the way PyTorch does; linked against fake_cublas,
// it runs anywhere. The seam test (cpu_record_test.cc, RecordSeam.GemmCalls...) records it with
// `detrace record` and checks every recorded field against the calls below, in this order:
//   1. cublasGemmEx, A^T B: m 64, n 1, k 512, bf16, lda 512, ldb 512, ldc 64, compute 32F
//   2. cublasSgemm_v2, A B^T: m 3, n 5, k 7, lda 3, ldb 5, ldc 3
//   3. cublasGemmStridedBatchedEx, f16, m 16, n 8, k 32, strides 512 / 256 / 128, batch 4,
//      CUBLAS_GEMM_DEFAULT_TENSOR_OP
//   4. cublasSgemmStridedBatched, A^T B^T: m 2, n 3, k 4, lda 4, ldb 3, ldc 2, strides 8 / 12 / 6,
//      batch 2
//   5. cublasLtMatmul, A^T B, bf16, m 128, n 4, k 256, with an algorithm of the caller's (id 21,
//      tile 18, split-K 3, reduction scheme 1, swizzle 1, custom option 2, stages 11)
//   6. and 7. the same problem without an algorithm (cuBLASLt's heuristic picks; asked once)
//   8. m 96, batch 2 (strides 24576 / 1024 / 384), without an algorithm (the heuristic asked again)
// Between 4 and 5, a cublasSgemm_v2 with m -1, which the fake refuses (recorded as called; its
// status is printed). Calls 1-4 run on stream 0x1234, 5-8 on stream 0x5678. It prints how often the
// fake's heuristic was asked.
#include <cstdint>
#include <cstdio>

#include <cublasLt.h>
#include <cublas_api.h>

extern "C" int fake_cublaslt_heuristic_calls();

#define CHECK(call)                                                \
  do {                                                             \
    if ((call) != CUBLAS_STATUS_SUCCESS) {                         \
      std::fprintf(stderr, "cublas_seam_app: %s failed\n", #call); \
      return 1;                                                    \
    }                                                              \
  } while (0)

namespace {

alignas(256) unsigned char g_a[1024], g_b[1024], g_c[1024], g_d[1024];

template <typename T>
cublasStatus_t setLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v);
}

template <typename T>
cublasStatus_t setAlgo(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &v, sizeof v);
}

int classicGemms() {
  cublasHandle_t h = nullptr;
  CHECK(cublasCreate_v2(&h));
  CHECK(cublasSetStream_v2(h, reinterpret_cast<cudaStream_t>(0x1234)));
  const float one = 1.0f, zero = 0.0f;
  const auto* fa = reinterpret_cast<const float*>(g_a);
  const auto* fb = reinterpret_cast<const float*>(g_b);
  auto* fc = reinterpret_cast<float*>(g_c);
  CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 64, 1, 512, &one, g_a, CUDA_R_16BF, 512, g_b,
                     CUDA_R_16BF, 512, &zero, g_c, CUDA_R_16BF, 64, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT));
  CHECK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_T, 3, 5, 7, &one, fa, 3, fb, 5, &zero, fc, 3));
  CHECK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 16, 8, 32, &one, g_a, CUDA_R_16F,
                                   16, 512, g_b, CUDA_R_16F, 32, 256, &zero, g_c, CUDA_R_16F, 16,
                                   128, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
  CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_T, 2, 3, 4, &one, fa, 4, 8, fb, 3, 12,
                                  &zero, fc, 2, 6, 2));
  // A refused call: its status must come back unchanged through the tracer.
  const cublasStatus_t refused =
      cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 5, 7, &one, fa, 3, fb, 7, &zero, fc, 3);
  std::printf("cublas_seam_app: refused call returned %d\n", static_cast<int>(refused));
  CHECK(cublasDestroy_v2(h));
  return 0;
}

int ltGemms() {
  cublasLtHandle_t h = nullptr;
  CHECK(cublasLtCreate(&h));
  cublasLtMatmulDesc_t desc = nullptr;
  CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t transpose = CUBLAS_OP_T;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                       sizeof transpose));
  // op(A) = A^T is m x k, so A is stored k x m.
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 256, 128, 256));
  CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 256, 4, 256));
  CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, 128, 4, 128));
  cublasLtMatmulAlgo_t algo;
  CHECK(cublasLtMatmulAlgoInit(h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, CUDA_R_16BF, 21, &algo));
  CHECK(setAlgo<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, 18));
  CHECK(setAlgo<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 3));
  CHECK(setAlgo<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 1));
  CHECK(setAlgo<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 1));
  CHECK(setAlgo<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 2));
  CHECK(setAlgo<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, 11));
  const float one = 1.0f, zero = 0.0f;
  auto* stream = reinterpret_cast<cudaStream_t>(0x5678);
  CHECK(cublasLtMatmul(h, desc, &one, g_a, a, g_b, b, &zero, g_d, d, g_d, d, &algo, g_c, 1024,
                       stream));
  for (int i = 0; i < 2; ++i) {
    CHECK(cublasLtMatmul(h, desc, &one, g_a, a, g_b, b, &zero, g_d, d, g_d, d, nullptr, g_c, 1024,
                         stream));
  }
  // m 96, two matrices per operand.
  CHECK(setLayout<uint64_t>(a, CUBLASLT_MATRIX_LAYOUT_COLS, 96));
  CHECK(setLayout<uint64_t>(d, CUBLASLT_MATRIX_LAYOUT_ROWS, 96));
  for (cublasLtMatrixLayout_t l : {a, b, d})
    CHECK(setLayout<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 2));
  CHECK(setLayout<int64_t>(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 24576));
  CHECK(setLayout<int64_t>(b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 1024));
  CHECK(setLayout<int64_t>(d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 384));
  CHECK(cublasLtMatmul(h, desc, &one, g_a, a, g_b, b, &zero, g_d, d, g_d, d, nullptr, g_c, 1024,
                       stream));
  for (cublasLtMatrixLayout_t l : {a, b, d}) CHECK(cublasLtMatrixLayoutDestroy(l));
  CHECK(cublasLtMatmulDescDestroy(desc));
  CHECK(cublasLtDestroy(h));
  return 0;
}

}  // namespace

int main() {
  if (classicGemms() != 0 || ltGemms() != 0) return 1;
  std::printf("cublas_seam_app: heuristic calls %d\n", fake_cublaslt_heuristic_calls());
  return 0;
}
