// cuBLASLt GEMMs with epilogues and FP8 scales, linked against fake_cublas (whose descriptors keep
// every attribute they are given). The seam test (cpu_record_test.cc,
// RecordSeam.CublasLtEpilogueAndScaleOperandsArePlanned...) records it with
// DETRACE_DIAG_GEMM_OPERANDS=1 and checks the operands planned for each call, in this order
// (A^T B with m 64, n 8, k 32, lda = ldb = 32, ldd 64, beta 0: C not read):
//   1. bf16, CUBLASLT_EPILOGUE_GELU_AUX_BIAS: bias (input, 64 bf16), aux (output, ld 72)
//   2. bf16, CUBLASLT_EPILOGUE_DRELU_BGRAD: aux (input ReLU mask, ld 128 bits), bias (gradient
//      output, 64 bf16)
//   3. bf16, CUBLASLT_EPILOGUE_BGRADB: bias (gradient output, n = 8 bf16)
//   4. A and B e4m3, D bf16, CUBLASLT_EPILOGUE_BIAS, A and B scales, D's amax
//   5. bf16, batch 2, CUBLASLT_EPILOGUE_GELU_BIAS with bias batch stride 64
//   6. bf16, CUBLASLT_EPILOGUE_DEFAULT with bias, aux, A scale and D amax pointers left set (as a
//      reused descriptor has them): none of them read (no epilogue uses them, no matrix is FP8)
// It prints each buffer's address ("buffer NAME ADDRESS") for the test to compare.
// CUBLAS_EPILOGUE_APP_BATCH_MISMATCH=1 makes one other call instead (see main).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <cublasLt.h>

#define CHECK(call)                                                    \
  do {                                                                 \
    if ((call) != CUBLAS_STATUS_SUCCESS) {                             \
      std::fprintf(stderr, "cublas_epilogue_app: %s failed\n", #call); \
      return 1;                                                        \
    }                                                                  \
  } while (0)

namespace {

alignas(256) unsigned char g_a[1 << 14], g_b[1 << 14], g_d[1 << 14], g_work[1024];
alignas(256) unsigned char g_bias[1024], g_aux[1 << 14], g_scale_a[4], g_scale_b[4], g_amax_d[4];

template <typename T>
cublasStatus_t setDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, T v) {
  return cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v);
}

template <typename T>
cublasStatus_t setLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v);
}

struct Call {
  cublasLtHandle_t handle;
  cudaDataType_t in;  // A's and B's type (D is bf16)
  int batch;
  int a_batch = 0;  // A's layout's batch count where not `batch` (an invalid call)
};

// One A^T B call (m 64, n 8, k 32) whose descriptor `set` configures.
template <typename Set>
int matmul(const Call& c, Set&& set) {
  cublasLtMatmulDesc_t desc = nullptr;
  CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CHECK(setDesc<int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T));
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  CHECK(cublasLtMatrixLayoutCreate(&a, c.in, 32, 64, 32));
  CHECK(cublasLtMatrixLayoutCreate(&b, c.in, 32, 8, 32));
  CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, 64, 8, 64));
  if (c.batch > 1) {
    for (cublasLtMatrixLayout_t l : {a, b, d}) {
      const int count = l == a && c.a_batch != 0 ? c.a_batch : c.batch;
      CHECK(setLayout<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count));
    }
    CHECK(setLayout<int64_t>(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 32 * 64));
    CHECK(setLayout<int64_t>(b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 32 * 8));
    CHECK(setLayout<int64_t>(d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 64 * 8));
  }
  if (set(desc) != 0) return 1;
  const float one = 1.0f, zero = 0.0f;
  CHECK(cublasLtMatmul(c.handle, desc, &one, g_a, a, g_b, b, &zero, g_d, d, g_d, d, nullptr,
                       g_work, sizeof g_work, reinterpret_cast<cudaStream_t>(0x5678)));
  for (cublasLtMatrixLayout_t l : {a, b, d}) CHECK(cublasLtMatrixLayoutDestroy(l));
  CHECK(cublasLtMatmulDescDestroy(desc));
  return 0;
}

int epilogue(cublasLtMatmulDesc_t desc, cublasLtEpilogue_t e) {
  CHECK(setDesc<uint32_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, e));
  CHECK(setDesc<const void*>(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g_bias));
  return 0;
}

int aux(cublasLtMatmulDesc_t desc, int64_t ld) {
  CHECK(setDesc<const void*>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g_aux));
  CHECK(setDesc<int64_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld));
  return 0;
}

int calls(cublasLtHandle_t h) {
  const Call bf16{h, CUDA_R_16BF, 1};
  if (matmul(bf16, [](cublasLtMatmulDesc_t d) {
        return epilogue(d, CUBLASLT_EPILOGUE_GELU_AUX_BIAS) + aux(d, 72);
      }) != 0 ||
      matmul(bf16, [](cublasLtMatmulDesc_t d) {
        return epilogue(d, CUBLASLT_EPILOGUE_DRELU_BGRAD) + aux(d, 128);
      }) != 0 ||
      matmul(bf16, [](cublasLtMatmulDesc_t d) {
        return epilogue(d, CUBLASLT_EPILOGUE_BGRADB);
      }) != 0) {
    return 1;
  }
  const Call fp8{h, CUDA_R_8F_E4M3, 1};
  if (matmul(fp8, [](cublasLtMatmulDesc_t d) {
        CHECK(setDesc<const void*>(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g_scale_a));
        CHECK(setDesc<const void*>(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g_scale_b));
        CHECK(setDesc<void*>(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, g_amax_d));
        return epilogue(d, CUBLASLT_EPILOGUE_BIAS);
      }) != 0) {
    return 1;
  }
  const Call batched{h, CUDA_R_16BF, 2};
  if (matmul(batched, [](cublasLtMatmulDesc_t d) {
        CHECK(setDesc<int64_t>(d, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, 64));
        return epilogue(d, CUBLASLT_EPILOGUE_GELU_BIAS);
      }) != 0) {
    return 1;
  }
  return matmul(bf16, [](cublasLtMatmulDesc_t d) {
    CHECK(setDesc<const void*>(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g_scale_a));
    CHECK(setDesc<void*>(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, g_amax_d));
    return epilogue(d, CUBLASLT_EPILOGUE_DEFAULT) + aux(d, 72);
  });
}

}  // namespace

int main() {
  const std::pair<const char*, const void*> buffers[] = {
      {"A", g_a},         {"B", g_b},           {"D", g_d},           {"bias", g_bias},
      {"aux", g_aux},     {"A_scale", g_scale_a}, {"B_scale", g_scale_b}, {"D_amax", g_amax_d}};
  for (const auto& [name, p] : buffers) std::printf("cublas_epilogue_app: buffer %s %p\n", name, p);
  std::fflush(stdout);
  cublasLtHandle_t h = nullptr;
  CHECK(cublasLtCreate(&h));
  // CUBLAS_EPILOGUE_APP_BATCH_MISMATCH=1: instead, one call of batch 2 whose A's layout counts one
  // batch (cuBLASLt refuses it; the stand-in runs it).
  if (const char* v = std::getenv("CUBLAS_EPILOGUE_APP_BATCH_MISMATCH"); v != nullptr && v[0] == '1') {
    Call mismatched{h, CUDA_R_16BF, 2};
    mismatched.a_batch = 1;
    if (matmul(mismatched, [](cublasLtMatmulDesc_t) { return 0; }) != 0) return 1;
  } else if (calls(h) != 0) {
    return 1;
  }
  CHECK(cublasLtDestroy(h));
  return 0;
}
