// GEMMs whose heuristic answer or compute type depends on more than the shape, linked against
// fake_cublas (whose heuristic answers +500 for a row-major A and +300 for a batched A of stride 0,
// as a real heuristic may answer differently for them). The seam test
// (cpu_record_test.cc, RecordSeam.HeuristicAnswersFollowLayoutOrderAndStrides...) records it and
// checks, in this order:
//   1. cublasLtMatmul, no algorithm, column-major A, B, D: m = n = k = 64, every ld 64
//   2. the same with every layout row-major: another question for the heuristic
//   3. the same column-major, A, B, D batched (2), A's batch stride 0 (broadcast)
//   4. the same with A's batch stride 4096: another question again
//   5. cublasGemmEx whose compute type is the cudaDataType CUDA_R_32F (as cuBLAS still accepts)
//   6. cublasSgemm_v2 with the handle in CUBLAS_TF32_TENSOR_OP_MATH
// It prints how often the fake's heuristic was asked.
#include <cstdint>
#include <cstdio>

#include <cublasLt.h>
#include <cublas_api.h>

extern "C" int fake_cublaslt_heuristic_calls();

#define CHECK(call)                                                   \
  do {                                                                \
    if ((call) != CUBLAS_STATUS_SUCCESS) {                            \
      std::fprintf(stderr, "cublas_layouts_app: %s failed\n", #call); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

namespace {

alignas(256) unsigned char g_a[1 << 16], g_b[1 << 16], g_d[1 << 16], g_work[1024];

template <typename T>
cublasStatus_t setLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v);
}

}  // namespace

int main() {
  cublasLtHandle_t lt;
  CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const float one = 1, zero = 0;
  auto* stream = reinterpret_cast<cudaStream_t>(0x5678);
  cublasLtMatrixLayout_t a, b, d;
  CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 64, 64, 64));
  CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 64, 64, 64));
  CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, 64, 64, 64));
  auto matmul = [&] {
    return cublasLtMatmul(lt, desc, &one, g_a, a, g_b, b, &zero, g_d, d, g_d, d, nullptr, g_work,
                          sizeof g_work, stream);
  };
  CHECK(matmul());                                                                          // 1
  for (auto l : {a, b, d}) CHECK(setLayout<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_ROW));
  CHECK(matmul());                                                                          // 2
  for (auto l : {a, b, d}) {
    CHECK(setLayout<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL));
    CHECK(setLayout<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 2));
    CHECK(setLayout<int64_t>(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 4096));
  }
  CHECK(setLayout<int64_t>(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0));
  CHECK(matmul());                                                                          // 3
  CHECK(setLayout<int64_t>(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 4096));
  CHECK(matmul());                                                                          // 4
  std::printf("cublas_layouts_app: heuristic calls %d\n", fake_cublaslt_heuristic_calls());

  cublasHandle_t blas;
  CHECK(cublasCreate_v2(&blas));
  CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, 64, 1, 64, &one, g_a, CUDA_R_16BF, 64, g_b,
                     CUDA_R_16BF, 64, &zero, g_d, CUDA_R_16BF, 64,
                     static_cast<cublasComputeType_t>(CUDA_R_32F), CUBLAS_GEMM_DEFAULT_TENSOR_OP));  // 5
  CHECK(cublasSetMathMode(blas, CUBLAS_TF32_TENSOR_OP_MATH));
  const auto* fa = reinterpret_cast<const float*>(g_a);
  CHECK(cublasSgemm_v2(blas, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, fa, 8, fa, 8, &zero,
                       reinterpret_cast<float*>(g_d), 8));  // 6
  return 0;
}
