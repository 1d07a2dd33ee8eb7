// LD_PRELOAD wrappers for cuBLASLt and cuBLAS GEMM entry points: each call is recorded at API time
// (shape, layouts, dtypes, compute type, and for cuBLASLt the algorithm), then forwarded unchanged.
//
// The algorithm. When the caller passes one to cublasLtMatmul, its configuration attributes are
// read (algo_source 1). When it passes none, cuBLASLt picks one internally with its heuristic; we
// ask cublasLtMatmulAlgoGetHeuristic the same question (same descriptors, the caller's workspace
// size and the operands' actual alignment) and record the top answer (algo_source 2). That query
// costs tens of microseconds, so answers are cached per distinct problem (bounded). The classic
// cuBLAS entry points (cublasGemmEx, ...) do not expose their algorithm: algo_source 0.
//
// In-process rules (see session.h): never throw, never change the call or its result.
#include <cublasLt.h>
#include <cublas_api.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "detrace/tracer/lru_map.h"
#include "diag_timing.h"
#include "fingerprinter.h"
#include "library_ops.h"
#include "next_symbol.h"
#include "placement.h"
#include "writer_ids.h"

namespace detrace::tracer {
namespace {

constexpr const char* kLt = kCublasLtLibrary;
constexpr const char* kBlas = kCublasLibrary;

// cuBLAS calls cuBLASLt internally: only the outermost GEMM call on a thread is recorded.
thread_local int t_gemm_depth = 0;
struct DepthScope {
  DepthScope() { ++t_gemm_depth; }
  ~DepthScope() { --t_gemm_depth; }
};

db::DType cudaDType(int t) {
  switch (t) {
    case CUDA_R_32F: return db::DType::kF32;
    case CUDA_R_16F: return db::DType::kF16;
    case CUDA_R_16BF: return db::DType::kBF16;
    case CUDA_R_64F: return db::DType::kF64;
    case CUDA_R_8I: return db::DType::kI8;
    case CUDA_R_8U: return db::DType::kU8;
    case CUDA_R_32I: return db::DType::kI32;
    case CUDA_R_8F_E4M3: return db::DType::kF8E4M3;
    case CUDA_R_8F_E5M2: return db::DType::kF8E5M2;
    default: return db::DType::kUnknown;
  }
}

const char* computeTypeName(int c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F: return "CUBLAS_COMPUTE_16F";
    case CUBLAS_COMPUTE_16F_PEDANTIC: return "CUBLAS_COMPUTE_16F_PEDANTIC";
    case CUBLAS_COMPUTE_32F: return "CUBLAS_COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_PEDANTIC: return "CUBLAS_COMPUTE_32F_PEDANTIC";
    case CUBLAS_COMPUTE_32F_FAST_16F: return "CUBLAS_COMPUTE_32F_FAST_16F";
    case CUBLAS_COMPUTE_32F_FAST_16BF: return "CUBLAS_COMPUTE_32F_FAST_16BF";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "CUBLAS_COMPUTE_32F_FAST_TF32";
    case CUBLAS_COMPUTE_32F_EMULATED_16BFX9: return "CUBLAS_COMPUTE_32F_EMULATED_16BFX9";
    case CUBLAS_COMPUTE_64F: return "CUBLAS_COMPUTE_64F";
    case CUBLAS_COMPUTE_64F_PEDANTIC: return "CUBLAS_COMPUTE_64F_PEDANTIC";
    case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT: return "CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT";
    case CUBLAS_COMPUTE_32I: return "CUBLAS_COMPUTE_32I";
    case CUBLAS_COMPUTE_32I_PEDANTIC: return "CUBLAS_COMPUTE_32I_PEDANTIC";
    default: return "CUBLAS_COMPUTE_unknown";
  }
}

// The cuBLASLt functions used to read descriptors (resolved once, from the program's cuBLASLt).
struct LtApi {
  RealFn<decltype(&cublasLtMatmulDescGetAttribute)> desc_get{"cublasLtMatmulDescGetAttribute", kLt};
  RealFn<decltype(&cublasLtMatrixLayoutGetAttribute)> layout_get{"cublasLtMatrixLayoutGetAttribute", kLt};
  RealFn<decltype(&cublasLtMatmulAlgoConfigGetAttribute)> algo_get{"cublasLtMatmulAlgoConfigGetAttribute", kLt};
  RealFn<decltype(&cublasLtMatmulPreferenceCreate)> pref_create{"cublasLtMatmulPreferenceCreate", kLt};
  RealFn<decltype(&cublasLtMatmulPreferenceDestroy)> pref_destroy{"cublasLtMatmulPreferenceDestroy", kLt};
  RealFn<decltype(&cublasLtMatmulPreferenceSetAttribute)> pref_set{"cublasLtMatmulPreferenceSetAttribute", kLt};
  RealFn<decltype(&cublasLtMatmulAlgoGetHeuristic)> heuristic{"cublasLtMatmulAlgoGetHeuristic", kLt};
};
LtApi& lt() {
  static LtApi api;
  return api;
}

template <typename T>
T descAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, T fallback) {
  T v{};
  size_t written = 0;
  auto fn = lt().desc_get.get();
  if (fn == nullptr || fn(d, a, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS) return fallback;
  return v;
}

template <typename T>
T layoutAttr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, T fallback) {
  T v{};
  size_t written = 0;
  auto fn = lt().layout_get.get();
  if (l == nullptr || fn == nullptr || fn(l, a, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS) {
    return fallback;
  }
  return v;
}

template <typename T>
int32_t algoAttr(const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  T v{};
  size_t written = 0;
  auto fn = lt().algo_get.get();
  if (fn == nullptr || fn(algo, a, &v, sizeof v, &written) != CUBLAS_STATUS_SUCCESS) return -1;
  return static_cast<int32_t>(v);
}

void readAlgo(const cublasLtMatmulAlgo_t* algo, db::Gemm& g) {
  g.algo_id = algoAttr<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  g.tile = algoAttr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  g.split_k = algoAttr<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  g.reduction_scheme = algoAttr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  g.swizzle = algoAttr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  g.custom_option = algoAttr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  g.stages = algoAttr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
}

uint32_t alignment(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// Cache of heuristic answers, keyed by everything that was asked.
using HeuristicKey = std::array<int64_t, 36>;
std::mutex g_heuristic_mu;
// Leaked, like every container a wrapper uses: a wrapper may run during the host's static teardown.
// The least recently used problem is forgotten past kMaxHeuristicCache (about 400 bytes each):
// a serving engine's token counts keep bringing new problems, and those seen lately come back.
constexpr size_t kMaxHeuristicCache = 16384;
auto& g_heuristic_cache = *new LruMap<HeuristicKey, cublasLtMatmulAlgo_t>(kMaxHeuristicCache);

bool heuristicAlgo(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                   cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                   const void* pa, const void* pb, const void* pc, const void* pd,
                   size_t workspace, const HeuristicKey& problem, cublasLtMatmulAlgo_t* out) {
  {
    std::lock_guard lk(g_heuristic_mu);
    if (const cublasLtMatmulAlgo_t* known = g_heuristic_cache.find(problem)) {
      *out = *known;
      return true;
    }
  }
  LtApi& api = lt();
  if (!api.pref_create.get() || !api.pref_destroy.get() || !api.pref_set.get() || !api.heuristic.get()) {
    return false;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  if (api.pref_create.get()(&pref) != CUBLAS_STATUS_SUCCESS) return false;
  uint64_t ws = workspace;
  api.pref_set.get()(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pa}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, pb},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, pc}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, pd}};
  for (const auto& [attr, ptr] : aligns) {
    uint32_t al = alignment(ptr);
    api.pref_set.get()(pref, attr, &al, sizeof al);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t st = api.heuristic.get()(handle, desc, a, b, c, d, pref, 1, &result, &returned);
  api.pref_destroy.get()(pref);
  if (st != CUBLAS_STATUS_SUCCESS || returned < 1 || result.state != CUBLAS_STATUS_SUCCESS) return false;
  *out = result.algo;
  std::lock_guard lk(g_heuristic_mu);
  g_heuristic_cache.put(problem, result.algo);
  return true;
}

// How one cuBLASLt matrix is stored: see GemmLayouts. An attribute this cuBLASLt does not know
// (BATCH_MODE before CUDA 13) reads as its default.
MatrixOrder layoutOrder(cublasLtMatrixLayout_t l) {
  if (l == nullptr) return MatrixOrder::kColumn;
  const auto mode = layoutAttr<uint32_t>(l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, CUBLASLT_BATCH_MODE_STRIDED);
  if (mode != CUBLASLT_BATCH_MODE_STRIDED) return MatrixOrder::kUnreadable;  // arrays of pointers
  switch (layoutAttr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL)) {
    case CUBLASLT_ORDER_COL: return MatrixOrder::kColumn;
    case CUBLASLT_ORDER_ROW: return MatrixOrder::kRow;
    default: return MatrixOrder::kUnreadable;  // tiled (COL32, COL4_4R2_8C, ...)
  }
}

// Whether cublasLtMatmul's beta is known to be 0, so that it never reads C: with host pointers
// (the default) the value is read here, in the descriptor's scale type.
bool betaIsZero(cublasLtMatmulDesc_t desc, const void* beta) {
  // A mode that cannot be read is not taken for host: beta may be a device pointer.
  const int32_t mode = descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, -1);
  if (mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO) return true;
  if (beta == nullptr || (mode != CUBLASLT_POINTER_MODE_HOST &&
                          mode != CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST)) {
    return false;
  }
  auto zero = [beta](auto type, int parts) {
    const auto* v = static_cast<const decltype(type)*>(beta);
    return std::all_of(v, v + parts, [](auto x) { return x == 0; });
  };
  switch (descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, CUDA_R_32F)) {
    case CUDA_R_32F: return zero(float{}, 1);
    case CUDA_C_32F: return zero(float{}, 2);
    case CUDA_R_64F: return zero(double{}, 1);
    case CUDA_C_64F: return zero(double{}, 2);
    case CUDA_R_32I: return zero(int32_t{}, 1);
    case CUDA_R_16F:
    case CUDA_R_16BF: return (*static_cast<const uint16_t*>(beta) & 0x7fff) == 0;  // +0 or -0
    default: return false;
  }
}

// operand_specs.h keeps cuBLASLt's epilogue values as numbers of its own (no CUDA header there).
static_assert(static_cast<uint32_t>(LtEpilogue::kDefault) == CUBLASLT_EPILOGUE_DEFAULT &&
              static_cast<uint32_t>(LtEpilogue::kRelu) == CUBLASLT_EPILOGUE_RELU &&
              static_cast<uint32_t>(LtEpilogue::kReluAux) == CUBLASLT_EPILOGUE_RELU_AUX &&
              static_cast<uint32_t>(LtEpilogue::kBias) == CUBLASLT_EPILOGUE_BIAS &&
              static_cast<uint32_t>(LtEpilogue::kReluBias) == CUBLASLT_EPILOGUE_RELU_BIAS &&
              static_cast<uint32_t>(LtEpilogue::kReluAuxBias) == CUBLASLT_EPILOGUE_RELU_AUX_BIAS &&
              static_cast<uint32_t>(LtEpilogue::kDRelu) == CUBLASLT_EPILOGUE_DRELU &&
              static_cast<uint32_t>(LtEpilogue::kDReluBGrad) == CUBLASLT_EPILOGUE_DRELU_BGRAD &&
              static_cast<uint32_t>(LtEpilogue::kGelu) == CUBLASLT_EPILOGUE_GELU &&
              static_cast<uint32_t>(LtEpilogue::kGeluAux) == CUBLASLT_EPILOGUE_GELU_AUX &&
              static_cast<uint32_t>(LtEpilogue::kGeluBias) == CUBLASLT_EPILOGUE_GELU_BIAS &&
              static_cast<uint32_t>(LtEpilogue::kGeluAuxBias) == CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
              static_cast<uint32_t>(LtEpilogue::kDGelu) == CUBLASLT_EPILOGUE_DGELU &&
              static_cast<uint32_t>(LtEpilogue::kDGeluBGrad) == CUBLASLT_EPILOGUE_DGELU_BGRAD &&
              static_cast<uint32_t>(LtEpilogue::kBGradA) == CUBLASLT_EPILOGUE_BGRADA &&
              static_cast<uint32_t>(LtEpilogue::kBGradB) == CUBLASLT_EPILOGUE_BGRADB);

// A descriptor's data type attribute: nullopt where it is unset (-1, cuBLASLt's default).
std::optional<db::DType> descDtype(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t a) {
  const int32_t t = descAttr<int32_t>(desc, a, -1);
  if (t == -1) return std::nullopt;
  return cudaDType(t);
}

uint64_t descPointer(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t a) {
  return reinterpret_cast<uintptr_t>(descAttr<const void*>(desc, a, nullptr));
}

LtScale descScale(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t pointer,
                  cublasLtMatmulDescAttributes_t mode) {
  LtScale s;
  s.address = descPointer(desc, pointer);
  if (s.address == 0) return s;
  switch (descAttr<int32_t>(desc, mode, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: s.mode = LtScaleMode::kScalar; break;
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: s.mode = LtScaleMode::kOuterVector; break;
    default: s.mode = LtScaleMode::kOther; break;
  }
  return s;
}

// The bias and aux attributes of a descriptor whose epilogue has them (LtOperands).
void readEpilogueOperands(cublasLtMatmulDesc_t desc, LtOperands& lt) {
  const EpilogueUse use = epilogueUse(lt.epilogue);
  if (use.bias != BiasUse::kNone) {
    lt.bias = descPointer(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER);
    lt.bias_dtype = descDtype(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
    lt.bias_stride = descAttr<int64_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, 0);
    const int32_t compute = descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, -1);
    lt.imma = compute == CUBLAS_COMPUTE_32I || compute == CUBLAS_COMPUTE_32I_PEDANTIC;
    lt.scale_type = cudaDType(descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, CUDA_R_32F));
  }
  if (use.aux != AuxUse::kNone) {
    lt.aux = descPointer(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER);
    lt.aux_dtype = descDtype(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE);
    lt.aux_ld = descAttr<int64_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 0);
    lt.aux_stride = descAttr<int64_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, 0);
  }
}

bool eightBitFloatOrUnknown(db::DType t) {
  return t == db::DType::kF8E4M3 || t == db::DType::kF8E5M2 || t == db::DType::kUnknown;
}

// The descriptor's epilogue and scaling operands (LtOperands), read only where they are
// fingerprinted and asked only where cuBLASLt takes them: the bias and aux attributes where the
// epilogue has them, the scales where a matrix is an 8-bit float or of a type detrace does not
// name (FP4 and the like; cublasLt.h has a scale set for a type combination without scales fail
// the call). The epilogue itself is recordLt's (g.epilogue, read for every call, at meta too), so a
// bf16 or fp16 GEMM without an epilogue costs nothing more here; an attribute this cuBLASLt does
// not know (the scale modes before CUDA 12.8) reads as its default.
LtOperands ltOperands(cublasLtMatmulDesc_t desc, const db::Gemm& g) {
  LtOperands lt;
  lt.epilogue = static_cast<uint32_t>(g.epilogue);  // recordLt read it
  readEpilogueOperands(desc, lt);
  const bool scaled = eightBitFloatOrUnknown(g.a_dtype) || eightBitFloatOrUnknown(g.b_dtype) ||
                      eightBitFloatOrUnknown(g.c_dtype) || eightBitFloatOrUnknown(g.d_dtype);
  if (!scaled) return lt;
  using Attr = cublasLtMatmulDescAttributes_t;
  constexpr std::array<std::pair<Attr, Attr>, 5> kScales = {{
      {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_MODE},
      {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_MODE},
      {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, CUBLASLT_MATMUL_DESC_C_SCALE_MODE},
      {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_MODE},
      {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER,
       CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE},
  }};
  for (size_t i = 0; i < kScales.size(); ++i) {
    lt.scales[i] = descScale(desc, kScales[i].first, kScales[i].second);
  }
  lt.amax_d = descPointer(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER);
  if (lt.aux != 0) lt.amax_aux = descPointer(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER);
  return lt;
}

// The layouts of a cublasLtMatmul's matrices and its descriptor's other operands (read only where
// they are fingerprinted).
GemmLayouts ltLayouts(cublasLtMatmulDesc_t desc, const void* beta, cublasLtMatrixLayout_t Ad,
                      cublasLtMatrixLayout_t Bd, cublasLtMatrixLayout_t Cd,
                      cublasLtMatrixLayout_t Dd, const db::Gemm& g) {
  GemmLayouts l;
  l.order = {layoutOrder(Ad), layoutOrder(Bd), layoutOrder(Cd), layoutOrder(Dd ? Dd : Cd)};
  // The extents use D's batch count (g.batch_count); a matrix whose layout counts another number
  // of batches makes an invalid call, whose inputs may still be digested before it: not read.
  // Only D's count above 1 can reach past an input (one matrix: the smallest extent), so the
  // common unbatched GEMM asks nothing more.
  if (g.batch_count > 1) {
    const cublasLtMatrixLayout_t inputs[] = {Ad, Bd, Cd};
    for (size_t i = 0; i < std::size(inputs); ++i) {
      if (layoutAttr<int32_t>(inputs[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1) != g.batch_count) {
        l.order[i] = MatrixOrder::kUnreadable;
      }
    }
  }
  l.c_unread = betaIsZero(desc, beta);
  l.lt = ltOperands(desc, g);
  return l;
}

// Records a cublasLtMatmul call.
uint64_t recordLt(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* A,
                  cublasLtMatrixLayout_t Ad, const void* B, cublasLtMatrixLayout_t Bd, const void* C,
                  cublasLtMatrixLayout_t Cd, void* D, cublasLtMatrixLayout_t Dd,
                  const cublasLtMatmulAlgo_t* algo, size_t workspace, cudaStream_t stream,
                  db::Gemm* recorded) {
  return recordLibraryOp([&](db::TraceWriter& w, LibraryOp& op) {
    db::Gemm g;
    g.api = cachedConstantId(w, "cublasLtMatmul");
    g.trans_a = descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N) != CUBLAS_OP_N;
    g.trans_b = descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N) != CUBLAS_OP_N;
    int32_t compute = descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, -1);
    g.compute_type = cachedConstantId(w, computeTypeName(compute));
    Dd = Dd ? Dd : Cd;
    g.m = static_cast<int64_t>(layoutAttr<uint64_t>(Dd, CUBLASLT_MATRIX_LAYOUT_ROWS, 0));
    g.n = static_cast<int64_t>(layoutAttr<uint64_t>(Dd, CUBLASLT_MATRIX_LAYOUT_COLS, 0));
    g.k = static_cast<int64_t>(layoutAttr<uint64_t>(
        Ad, g.trans_a ? CUBLASLT_MATRIX_LAYOUT_ROWS : CUBLASLT_MATRIX_LAYOUT_COLS, 0));
    g.lda = layoutAttr<int64_t>(Ad, CUBLASLT_MATRIX_LAYOUT_LD, 0);
    g.ldb = layoutAttr<int64_t>(Bd, CUBLASLT_MATRIX_LAYOUT_LD, 0);
    g.ldc = layoutAttr<int64_t>(Cd, CUBLASLT_MATRIX_LAYOUT_LD, 0);
    g.ldd = layoutAttr<int64_t>(Dd, CUBLASLT_MATRIX_LAYOUT_LD, 0);
    g.batch_count = layoutAttr<int32_t>(Dd, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
    g.stride_a = layoutAttr<int64_t>(Ad, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    g.stride_b = layoutAttr<int64_t>(Bd, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    g.stride_c = layoutAttr<int64_t>(Cd, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    g.stride_d = layoutAttr<int64_t>(Dd, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 0);
    int32_t ta = static_cast<int32_t>(layoutAttr<uint32_t>(Ad, CUBLASLT_MATRIX_LAYOUT_TYPE, 1000));
    int32_t tb = static_cast<int32_t>(layoutAttr<uint32_t>(Bd, CUBLASLT_MATRIX_LAYOUT_TYPE, 1000));
    int32_t tc = static_cast<int32_t>(layoutAttr<uint32_t>(Cd, CUBLASLT_MATRIX_LAYOUT_TYPE, 1000));
    int32_t td = static_cast<int32_t>(layoutAttr<uint32_t>(Dd, CUBLASLT_MATRIX_LAYOUT_TYPE, 1000));
    g.a_dtype = cudaDType(ta);
    g.b_dtype = cudaDType(tb);
    g.c_dtype = cudaDType(tc);
    g.d_dtype = cudaDType(td);
    g.a_addr = reinterpret_cast<int64_t>(A);
    g.b_addr = reinterpret_cast<int64_t>(B);
    g.c_addr = reinterpret_cast<int64_t>(C);
    g.d_addr = reinterpret_cast<int64_t>(D);
    g.epilogue = static_cast<int32_t>(
        descAttr<uint32_t>(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT));
    if (algo != nullptr) {
      readAlgo(algo, g);
      g.algo_source = 1;
    } else {
      // Everything the heuristic's answer depends on: two problems that differ only in a layout's
      // order, a batch stride (0 broadcasts) or an FP8/epilogue setting are different questions.
      auto order = [](cublasLtMatrixLayout_t l) {
        return layoutAttr<int32_t>(l, CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL);
      };
      HeuristicKey key{reinterpret_cast<int64_t>(handle), g.trans_a, g.trans_b, compute, g.m, g.n, g.k,
                       g.lda, g.ldb, g.ldc, g.ldd, g.batch_count, ta, tb, tc, td,
                       static_cast<int64_t>(workspace),
                       g.epilogue,
                       descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, -1),
                       alignment(A), alignment(B), alignment(C), alignment(D),
                       order(Ad), order(Bd), order(Cd), order(Dd),
                       g.stride_a, g.stride_b, g.stride_c, g.stride_d,
                       descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, 0),
                       descAttr<int8_t>(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, 0),
                       descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, -1),
                       descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, 0) * 64 +
                           descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, 0),
                       descAttr<int32_t>(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, 0)};
      cublasLtMatmulAlgo_t chosen{};
      if (heuristicAlgo(handle, desc, Ad, Bd, Cd, Dd, A, B, C, D, workspace, key, &chosen)) {
        readAlgo(&chosen, g);
        g.algo_source = 2;
      }
    }
    op.event.kind = db::EventKind::kGemm;
    op.event.name = g.api;
    op.event.stream = opStreamId(w, reinterpret_cast<int64_t>(stream), -1, op.record_stream);
    op.detail = g;
    *recorded = g;
    return true;
  }, true, "cublasLtMatmul");
}

// Classic cuBLAS stores every matrix column-major; C (its D) is read unless beta is 0, which is
// known here where beta is a host pointer (the handle's pointer mode) of the scalar type the
// compute type implies (a cudaDataType compute type, as older callers pass, included).
GemmLayouts columnMajor(cublasHandle_t handle, const void* beta, int compute) {
  GemmLayouts l;
  static RealFn<decltype(&cublasGetPointerMode_v2)> get_mode("cublasGetPointerMode_v2", kBlas);
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_DEVICE;
  auto fn = get_mode.get();
  if (beta == nullptr || fn == nullptr || fn(handle, &mode) != CUBLAS_STATUS_SUCCESS ||
      mode != CUBLAS_POINTER_MODE_HOST) {
    return l;
  }
  switch (compute) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC: case CUDA_R_16F:
      l.c_unread = (*static_cast<const uint16_t*>(beta) & 0x7fff) == 0; break;
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF: case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32F_EMULATED_16BFX9: case CUDA_R_32F:
      l.c_unread = *static_cast<const float*>(beta) == 0; break;
    case CUBLAS_COMPUTE_64F: case CUBLAS_COMPUTE_64F_PEDANTIC:
    case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT: case CUDA_R_64F:
      l.c_unread = *static_cast<const double*>(beta) == 0; break;
    case CUBLAS_COMPUTE_32I: case CUBLAS_COMPUTE_32I_PEDANTIC: case CUDA_R_32I:
      l.c_unread = *static_cast<const int32_t*>(beta) == 0; break;
    default: break;  // unknown: C counts as read
  }
  return l;
}

// The compute type a classic call runs with: a cudaDataType passed as the compute type (accepted
// for backward compatibility; PyTorch's half path passes CUDA_R_32F or CUDA_R_16F) as its
// cublasComputeType_t, and for single-precision routines and such calls the handle's math mode
// (TF32, BF16x9 emulation, pedantic), which PyTorch sets from allow_tf32.
int classicCompute(cublasHandle_t handle, int compute, int a_type, bool legacy_or_sgemm) {
  switch (compute) {
    case CUDA_R_16F: compute = CUBLAS_COMPUTE_16F; break;
    case CUDA_R_32F: compute = CUBLAS_COMPUTE_32F; break;
    case CUDA_R_64F: compute = CUBLAS_COMPUTE_64F; break;
    case CUDA_R_32I: compute = CUBLAS_COMPUTE_32I; break;
    default: break;
  }
  if (!legacy_or_sgemm) return compute;
  static RealFn<decltype(&cublasGetMathMode)> get_math("cublasGetMathMode", kBlas);
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
  auto fn = get_math.get();
  if (fn == nullptr || fn(handle, &mode) != CUBLAS_STATUS_SUCCESS) return compute;
  const int m = static_cast<int>(mode) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (m == CUBLAS_PEDANTIC_MATH) {
    if (compute == CUBLAS_COMPUTE_16F) return CUBLAS_COMPUTE_16F_PEDANTIC;
    if (compute == CUBLAS_COMPUTE_32F) return CUBLAS_COMPUTE_32F_PEDANTIC;
    if (compute == CUBLAS_COMPUTE_64F) return CUBLAS_COMPUTE_64F_PEDANTIC;
  }
  if (compute == CUBLAS_COMPUTE_32F && a_type == CUDA_R_32F) {
    if (m == CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_COMPUTE_32F_FAST_TF32;
    if (m == CUBLAS_FP32_EMULATED_BF16X9_MATH) return CUBLAS_COMPUTE_32F_EMULATED_16BFX9;
  }
  return compute;
}

// Records a classic cuBLAS GEMM (algorithm not exposed: algo_source 0).
struct BlasGemm {
  const char* api;
  cublasHandle_t handle;
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  int a_type, b_type, c_type;
  int compute;
  int64_t stride_a, stride_b, stride_c;
  int batch;
  const void *A, *B, *C;
  int gemm_algo;
  bool sgemm = false;  // a single-precision routine (cublasSgemm*): the math mode applies
};

uint64_t recordBlas(const BlasGemm& c, db::Gemm* recorded, cudaStream_t* stream_out) {
  return recordLibraryOp([&](db::TraceWriter& w, LibraryOp& op) {
    static RealFn<decltype(&cublasGetStream_v2)> get_stream("cublasGetStream_v2", kBlas);
    cudaStream_t stream = nullptr;
    if (auto fn = get_stream.get()) (void)fn(c.handle, &stream);
    *stream_out = stream;
    db::Gemm g;
    g.api = cachedConstantId(w, c.api);
    g.trans_a = c.ta != CUBLAS_OP_N;
    g.trans_b = c.tb != CUBLAS_OP_N;
    g.m = c.m; g.n = c.n; g.k = c.k;
    g.lda = c.lda; g.ldb = c.ldb; g.ldc = c.ldc; g.ldd = c.ldc;
    g.batch_count = c.batch;
    g.stride_a = c.stride_a; g.stride_b = c.stride_b; g.stride_c = c.stride_c; g.stride_d = c.stride_c;
    g.a_dtype = cudaDType(c.a_type);
    g.b_dtype = cudaDType(c.b_type);
    g.c_dtype = g.d_dtype = cudaDType(c.c_type);
    const bool legacy_or_sgemm = c.compute < CUBLAS_COMPUTE_16F || c.sgemm;
    g.compute_type = cachedConstantId(
        w, computeTypeName(classicCompute(c.handle, c.compute, c.a_type, legacy_or_sgemm)));
    g.algo_id = c.gemm_algo;  // the cublasGemmAlgo_t the caller asked for (-1 = default)
    g.algo_source = 0;
    g.a_addr = reinterpret_cast<int64_t>(c.A);
    g.b_addr = reinterpret_cast<int64_t>(c.B);
    g.c_addr = g.d_addr = reinterpret_cast<int64_t>(c.C);
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // no epilogue: D = alpha op(A) op(B) + beta C
    op.event.kind = db::EventKind::kGemm;
    op.event.name = g.api;
    op.event.stream = opStreamId(w, reinterpret_cast<int64_t>(stream), -1, op.record_stream);
    op.detail = g;
    *recorded = g;
    return true;
  }, true, c.api);
}

// DETRACE_DIAG_GEMM_OPERANDS=1: each fingerprinted GEMM's operands on stderr as they are planned,
// before any digest is taken: for the CPU seam tests, whose fake drivers take none.
bool diagGemmOperands() {
  static const bool on = [] {
    const char* v = std::getenv("DETRACE_DIAG_GEMM_OPERANDS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

void logOperands(uint64_t token, const std::vector<OperandSpec>& specs) {
  for (const OperandSpec& s : specs) {
    logLine("gemm operand: token %llu slot %d %s role %d dtype %s address 0x%llx bytes %llu "
            "rows %lld row_bytes %lld row_stride %lld",
            static_cast<unsigned long long>(token), s.slot, s.name.c_str(),
            static_cast<int>(s.role), db::dtypeName(s.dtype),
            static_cast<unsigned long long>(s.address), static_cast<unsigned long long>(s.bytes),
            static_cast<long long>(s.rows),
            static_cast<long long>(s.row_bytes), static_cast<long long>(s.row_stride));
  }
}

// Fingerprints around a GEMM call (stream-ordered): all operands after it in one enqueue where the
// call cannot change its inputs (fingerprintPlan), else the inputs before it and the output after
// it. On a stream being captured, the graph nodes the call creates are noted too: they find the
// op's kernels at every replay.
class GemmFingerprints {
 public:
  template <typename Layouts>
  GemmFingerprints(uint64_t token, const db::Gemm& g, cudaStream_t stream, Layouts&& layouts) noexcept
      : token_(token), stream_(reinterpret_cast<CUstream>(stream)) {
    // At --capture meta nothing is fingerprinted: no operand specs either (their vectors cost a
    // GEMM's thread about a microsecond), and no row width for the next collective's digests.
    if (token_ == 0) return;
    try {
      if (!Fingerprinter::get().enabled()) {  // its first call allocates: inside the try
        token_ = 0;
        return;
      }
      specs_ = gemmOperandSpecs(g, Session::get().policy().row_digests, layouts(g));
    } catch (...) {  // out of memory: this GEMM stays recorded, without fingerprints
      token_ = 0;
      return;
    }
    if (diagGemmOperands()) logOperands(token_, specs_);
    plan_ = fingerprintPlan(stream_, specs_);
    if (!plan_.all_after) {
      fingerprintOperands(token_, stream_, specs_, /*inputs=*/true, nullptr,
                          plan_.knownUncaptured());
    }
    if (plan_.captured) nodes_.emplace();  // after the input digests: the call's nodes only
    for (const OperandSpec& s : specs_) {  // D's rows (not the aux's, whose mask rows are bits)
      if (s.slot == kSlotD && s.row_bytes > 0) setLastGemmRowBytes(s.row_bytes);
    }
  }
  void after(bool ok) noexcept {
    if (token_ == 0) return;
    CallNodes nodes;
    nodes.all_after = plan_.all_after;
    if (nodes_) nodes.ids = nodes_->take();
    nodes_.reset();
    const CallNodes* captured = plan_.captured ? &nodes : nullptr;
    if (!ok) {
      // A refused call's arguments may describe memory it does not have (the library checks
      // them, the tracer cannot): nothing is read after it. (Inputs digested before the call,
      // where it may overwrite them, were read already.)
      Session::get().addStat("fingerprints_skipped_failed_call", 1);
      // Captured, its input digests may be in the graph already: its replays must not say it ran.
      if (plan_.captured) Fingerprinter::get().refuseCaptured(token_);
      return;
    }
    if (plan_.all_after) {
      fingerprintAllOperands(token_, stream_, std::move(specs_), plan_, captured);  // their last use
    } else {
      fingerprintOperands(token_, stream_, specs_, /*inputs=*/false, captured,
                          plan_.knownUncaptured());
    }
  }

 private:
  uint64_t token_;
  CUstream stream_;
  std::vector<OperandSpec> specs_;
  DigestPlan plan_;
  std::optional<CallNodeScope> nodes_;
};

cublasStatus_t missing(const char* name) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) logLine("%s: the real cuBLAS function was not found in this process", name);
  return CUBLAS_STATUS_NOT_INITIALIZED;
}

// With DETRACE_DIAG_TIMING=1, the gap from one outermost GEMM call's return to the next one's
// entry on the thread (gemm_gap: the program's own work between GEMMs; gaps of kMaxGapNs or more,
// the pauses between loops, left out), and which sites a GEMM call's timings go to: apart while
// paused and while capturing, so that one toggled process says which part a capture slows.
class GemmGap {
 public:
  explicit GemmGap(bool on) : on_(on), capturing_(on && Session::get().capturing()) {
    if (!on_) return;
    const int64_t gap = diagNowNs() - t_exit_ns;
    if (t_exit_ns != 0 && t_exit_capturing == capturing_ && gap < kMaxGapNs)
      diagAdd(capturing_ ? DiagSite::kGemmGap : DiagSite::kGemmGapPaused, gap);
  }
  ~GemmGap() {
    if (!on_) return;
    t_exit_ns = diagNowNs();
    t_exit_capturing = capturing_;
  }
  GemmGap(const GemmGap&) = delete;
  GemmGap& operator=(const GemmGap&) = delete;
  DiagSite wrapperSite() const {
    return capturing_ || !on_ ? DiagSite::kGemmWrapper : DiagSite::kGemmWrapperPaused;
  }
  DiagSite callSite() const {
    return capturing_ || !on_ ? DiagSite::kGemmCall : DiagSite::kGemmCallPaused;
  }

 private:
  static constexpr int64_t kMaxGapNs = 20'000'000;
  static inline thread_local int64_t t_exit_ns = 0;
  static inline thread_local bool t_exit_capturing = false;
  bool on_;
  bool capturing_;
};

// One interposed GEMM call: `record(g, stream)` records it (outermost GEMM call of the thread
// only) and returns its token, `call()` forwards it; fingerprints around the forwarded call, of
// the matrices as `layouts(g)` says they are stored (asked only when they are fingerprinted). With
// DETRACE_DIAG_TIMING=1, gemm_wrapper times the whole outermost call and gemm_call the forwarded
// one inside it: their difference is everything the tracer does on a GEMM's thread.
template <typename Record, typename Call, typename Layouts>
cublasStatus_t tracedGemm(Record&& record, Call&& call, Layouts&& layouts) {
  const bool outermost = t_gemm_depth == 0;
  GemmGap gap(outermost && diagTimingOn());  // destroyed last: its exit time ends the whole call
  std::optional<DiagScope> whole;
  if (outermost) whole.emplace(gap.wrapperSite());
  uint64_t token = 0;
  db::Gemm g;
  cudaStream_t stream = nullptr;
  if (outermost) token = record(g, stream);
  GemmFingerprints prints(token, g, stream, layouts);
  cublasStatus_t st;
  {
    DepthScope depth;
    ParentScope scope(token);
    std::optional<DiagScope> forwarded;
    if (outermost) forwarded.emplace(gap.callSite());
    st = call();
  }
  prints.after(st == CUBLAS_STATUS_SUCCESS);
  return st;
}

}  // namespace
}  // namespace detrace::tracer

using namespace detrace::tracer;

DETRACE_EXPORT cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,
    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
    cudaStream_t stream) {
  static RealFn<decltype(&cublasLtMatmul)> real("cublasLtMatmul", kLt);
  auto fn = real.get();
  if (fn == nullptr) return missing("cublasLtMatmul");
  return tracedGemm(
      [&](detrace::db::Gemm& g, cudaStream_t& s) {
        s = stream;
        return recordLt(lightHandle, computeDesc, A, Adesc, B, Bdesc, C, Cdesc, D, Ddesc, algo,
                        workspaceSizeInBytes, stream, &g);
      },
      [&] {
        return fn(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
                  algo, workspace, workspaceSizeInBytes, stream);
      },
      [&](const detrace::db::Gemm& g) {
        return ltLayouts(computeDesc, beta, Adesc, Bdesc, Cdesc, Ddesc, g);
      });
}

DETRACE_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const void* alpha, const void* A, cudaDataType Atype,
                                           int lda, const void* B, cudaDataType Btype, int ldb,
                                           const void* beta, void* C, cudaDataType Ctype, int ldc,
                                           cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  static RealFn<cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const void*, const void*, cudaDataType, int, const void*,
                                   cudaDataType, int, const void*, void*, cudaDataType, int,
                                   cublasComputeType_t, cublasGemmAlgo_t)>
      real("cublasGemmEx", kBlas);
  auto fn = real.get();
  if (fn == nullptr) return missing("cublasGemmEx");
  return tracedGemm(
      [&](detrace::db::Gemm& g, cudaStream_t& stream) {
        return recordBlas(
            {"cublasGemmEx", handle, transa, transb, m, n, k, lda, ldb, ldc, Atype, Btype, Ctype,
             computeType, 0, 0, 0, 1, A, B, C, algo},
            &g, &stream);
      },
      [&] {
        return fn(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
                  Ctype, ldc, computeType, algo);
      },
      [&](const detrace::db::Gemm&) { return columnMajor(handle, beta, computeType); });
}

DETRACE_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  static RealFn<cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const void*, const void*, cudaDataType, int, long long int,
                                   const void*, cudaDataType, int, long long int, const void*, void*,
                                   cudaDataType, int, long long int, int, cublasComputeType_t,
                                   cublasGemmAlgo_t)>
      real("cublasGemmStridedBatchedEx", kBlas);
  auto fn = real.get();
  if (fn == nullptr) return missing("cublasGemmStridedBatchedEx");
  return tracedGemm(
      [&](detrace::db::Gemm& g, cudaStream_t& stream) {
        return recordBlas(
            {"cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, lda, ldb, ldc, Atype,
             Btype, Ctype, computeType, strideA, strideB, strideC, batchCount, A, B, C, algo},
            &g, &stream);
      },
      [&] {
        return fn(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                  strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
      },
      [&](const detrace::db::Gemm&) { return columnMajor(handle, beta, computeType); });
}

DETRACE_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int m, int n, int k,
                                             const float* alpha, const float* A, int lda,
                                             const float* B, int ldb, const float* beta, float* C,
                                             int ldc) {
  static RealFn<decltype(&cublasSgemm_v2)> real("cublasSgemm_v2", kBlas);
  auto fn = real.get();
  if (fn == nullptr) return missing("cublasSgemm_v2");
  return tracedGemm(
      [&](detrace::db::Gemm& g, cudaStream_t& stream) {
        return recordBlas(
            {"cublasSgemm", handle, transa, transb, m, n, k, lda, ldb, ldc, CUDA_R_32F, CUDA_R_32F,
             CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 0, 0, 1, A, B, C, -1, true},
            &g, &stream);
      },
      [&] {
        return fn(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
      },
      [&](const detrace::db::Gemm&) { return columnMajor(handle, beta, CUBLAS_COMPUTE_32F); });
}

DETRACE_EXPORT cublasStatus_t cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
    long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
    int batchCount) {
  static RealFn<decltype(&cublasSgemmStridedBatched)> real("cublasSgemmStridedBatched", kBlas);
  auto fn = real.get();
  if (fn == nullptr) return missing("cublasSgemmStridedBatched");
  return tracedGemm(
      [&](detrace::db::Gemm& g, cudaStream_t& stream) {
        return recordBlas(
            {"cublasSgemmStridedBatched", handle, transa, transb, m, n, k, lda, ldb, ldc,
             CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, strideA, strideB, strideC,
             batchCount, A, B, C, -1, true},
            &g, &stream);
      },
      [&] {
        return fn(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta,
                  C, ldc, strideC, batchCount);
      },
      [&](const detrace::db::Gemm&) { return columnMajor(handle, beta, CUBLAS_COMPUTE_32F); });
}
