// A stand-in cuBLAS and cuBLASLt for the LD_PRELOAD seam test (no GPU, no real cuBLAS): GEMMs
// succeed and compute nothing (cublasSgemm_v2 refuses negative sizes); handles and descriptors are
// heap objects that keep what they were given, so the tracer's wrappers can read them back as they
// read the real ones.
//
// - Matmul descriptors keep their compute type, scale type, transposes and epilogue, and any other
//   attribute set on them (the epilogue's bias and aux pointers, leading dimension and strides,
//   FP8 scale and amax pointers); matrix layouts their type, rows, columns, leading dimension,
//   batch count and batch stride (set at creation or through SetAttribute, read through
//   GetAttribute with the real API's size rules). An attribute never set is refused where the
//   real library answers its default: the tracer reads either as the default.
// - An algorithm's configuration lives in its cublasLtMatmulAlgo_t: data[0] the id (from
//   cublasLtMatmulAlgoInit), data[1 + i] the i-th of tile, split-K, reduction scheme, CTA
//   swizzling, custom option and stages.
// - The heuristic answers every problem with id 100 + (m mod 50), tile 7 and split-K 1, and counts
//   its calls (fake_cublaslt_heuristic_calls), so a test can tell the tracer's cache from a fresh
//   question.
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include <cublasLt.h>
#include <cublas_api.h>

namespace {

// Attributes by number, each its bytes as last set.
struct Attributes {
  std::map<int, std::vector<unsigned char>> values;

  template <typename T>
  void put(int attr, T v) {
    std::vector<unsigned char> bytes(sizeof v);
    std::memcpy(bytes.data(), &v, sizeof v);
    values[attr] = std::move(bytes);
  }
  cublasStatus_t set(int attr, const void* buf, size_t size) {
    if (buf == nullptr || size == 0) return CUBLAS_STATUS_INVALID_VALUE;
    const auto* p = static_cast<const unsigned char*>(buf);
    values[attr].assign(p, p + size);
    return CUBLAS_STATUS_SUCCESS;
  }
  // As the real getters: size 0 and no buffer asks for the size; a smaller buffer is an error.
  cublasStatus_t get(int attr, void* buf, size_t size, size_t* written) const {
    auto it = values.find(attr);
    if (it == values.end()) return CUBLAS_STATUS_INVALID_VALUE;
    if (size == 0 && buf == nullptr) {
      if (written == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
      *written = it->second.size();
      return CUBLAS_STATUS_SUCCESS;
    }
    if (buf == nullptr || size < it->second.size()) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, it->second.data(), it->second.size());
    if (written != nullptr) *written = it->second.size();
    return CUBLAS_STATUS_SUCCESS;
  }
};

struct BlasHandle {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

int g_heuristic_calls = 0;

constexpr cublasLtMatmulAlgoConfigAttributes_t kAlgoFields[] = {
    CUBLASLT_ALGO_CONFIG_TILE_ID,          CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
    CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
    CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,    CUBLASLT_ALGO_CONFIG_STAGES_ID};

int algoField(cublasLtMatmulAlgoConfigAttributes_t attr) {
  if (attr == CUBLASLT_ALGO_CONFIG_ID) return 0;
  for (int i = 0; i < 6; ++i) {
    if (kAlgoFields[i] == attr) return 1 + i;
  }
  return -1;
}

Attributes* attrs(const void* p) { return static_cast<Attributes*>(const_cast<void*>(p)); }

}  // namespace

extern "C" {

int fake_cublaslt_heuristic_calls() { return g_heuristic_calls; }

// ---- classic cuBLAS ----

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new BlasHandle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  delete reinterpret_cast<BlasHandle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  reinterpret_cast<BlasHandle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  *stream = reinterpret_cast<BlasHandle*>(handle)->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                         int, int, const void*, const void*, cudaDataType, int,
                                         const void*, cudaDataType, int, const void*, void*,
                                         cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
    void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t) {
  return CUBLAS_STATUS_SUCCESS;
}
// A negative size is refused, as the real one refuses it.
cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                           int m, int n, int k, const float*, const float*, int,
                                           const float*, int, const float*, float*, int) {
  return m < 0 || n < 0 || k < 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t,
                                                      cublasOperation_t, int, int, int,
                                                      const float*, const float*, int,
                                                      long long int, const float*, int,
                                                      long long int, const float*, float*, int,
                                                      long long int, int) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  reinterpret_cast<BlasHandle*>(h)->math = m;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasGetMathMode(cublasHandle_t h, cublasMath_t* m) {
  *m = reinterpret_cast<BlasHandle*>(h)->math;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasGetPointerMode_v2(cublasHandle_t, cublasPointerMode_t* m) {
  *m = CUBLAS_POINTER_MODE_HOST;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt ----

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = reinterpret_cast<cublasLtHandle_t>(new char);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  auto* a = new Attributes;
  a->put<int32_t>(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute);
  a->put<int32_t>(CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale);
  a->put<int32_t>(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
  a->put<int32_t>(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  a->put<uint32_t>(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
  a->put<int32_t>(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST);  // cuBLASLt's default
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(a);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete attrs(desc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t size) {
  return attrs(desc)->set(attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           void* buf, size_t size,
                                                           size_t* written) {
  return attrs(desc)->get(attr, buf, size, written);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  auto* a = new Attributes;
  a->put<uint32_t>(CUBLASLT_MATRIX_LAYOUT_TYPE, type);
  a->put<uint64_t>(CUBLASLT_MATRIX_LAYOUT_ROWS, rows);
  a->put<uint64_t>(CUBLASLT_MATRIX_LAYOUT_COLS, cols);
  a->put<int64_t>(CUBLASLT_MATRIX_LAYOUT_LD, ld);
  a->put<int32_t>(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
  a->put<int64_t>(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(a);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete attrs(layout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t size) {
  return attrs(layout)->set(attr, buf, size);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             void* buf, size_t size,
                                                             size_t* written) {
  return attrs(layout)->get(attr, buf, size, written);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoInit(cublasLtHandle_t, cublasComputeType_t,
                                                   cudaDataType_t, cudaDataType_t, cudaDataType_t,
                                                   cudaDataType_t, cudaDataType_t, int algo_id,
                                                   cublasLtMatmulAlgo_t* algo) {
  std::memset(algo, 0, sizeof *algo);
  algo->data[0] = static_cast<uint64_t>(algo_id);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigSetAttribute(
    cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
    size_t size) {
  const int field = algoField(attr);
  if (field <= 0 || buf == nullptr || size != 4) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t v = 0;
  std::memcpy(&v, buf, 4);
  algo->data[field] = v;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
    size_t size, size_t* written) {
  const int field = algoField(attr);
  if (field < 0 || buf == nullptr || size < 4) return CUBLAS_STATUS_INVALID_VALUE;
  const auto v = static_cast<uint32_t>(algo->data[field]);
  std::memcpy(buf, &v, 4);
  if (written != nullptr) *written = 4;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Attributes);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete attrs(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t size) {
  return attrs(pref)->set(attr, buf, size);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  ++g_heuristic_calls;
  if (requested < 1 || results == nullptr || returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m = 0;
  (void)attrs(Ddesc)->get(CUBLASLT_MATRIX_LAYOUT_ROWS, &m, sizeof m, nullptr);
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = 100 + m % 50;  // id
  // A row-major A, or a batched A of stride 0 (broadcast), is another problem for a real heuristic.
  int32_t order = CUBLASLT_ORDER_COL, batch = 1;
  int64_t stride = 0;
  (void)attrs(Adesc)->get(CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order, nullptr);
  (void)attrs(Adesc)->get(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch, nullptr);
  (void)attrs(Adesc)->get(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride, nullptr);
  if (order == CUBLASLT_ORDER_ROW) results[0].algo.data[0] += 500;
  if (batch > 1 && stride == 0) results[0].algo.data[0] += 300;
  results[0].algo.data[1] = 7;             // tile
  results[0].algo.data[2] = 1;             // split-K
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*,
                                           const void*, cublasLtMatrixLayout_t, const void*,
                                           cublasLtMatrixLayout_t, const void*, const void*,
                                           cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
                                           const cublasLtMatmulAlgo_t*, void*, size_t,
                                           cudaStream_t) {
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
