// cuBLASLt with one pinned algorithm per (N, K, types), and cuBLASLt's own per-shape heuristic as
// the baseline (gemm_cublaslt.h explains the layout mapping and the guarantee).
#include "detrace/kernels/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "detrace/kernels/gemm.h"

namespace detrace::kernels {
namespace {

Status cublasStatus(cublasStatus_t s, std::string_view call) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  const ErrorCode code = s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH
                             ? ErrorCode::kUnavailable
                             : ErrorCode::kInternal;
  return makeError(code, "{} failed: {} ({})", call, cublasLtGetStatusString(s),
                   cublasLtGetStatusName(s));
}

// One checking macro for cuBLASLt: returns a Status naming the call.
#define DETRACE_CUBLASLT_CHECK(call)                                      \
  do {                                                                    \
    const cublasStatus_t detrace_lt_status_ = (call);                     \
    if (detrace_lt_status_ != CUBLAS_STATUS_SUCCESS) {                    \
      return cublasStatus(detrace_lt_status_, #call);                     \
    }                                                                     \
  } while (0)

inline void destroyMatmulDesc(cublasLtMatmulDesc_t d) { cublasLtMatmulDescDestroy(d); }
inline void destroyLayout(cublasLtMatrixLayout_t l) { cublasLtMatrixLayoutDestroy(l); }
inline void destroyPreference(cublasLtMatmulPreference_t p) { cublasLtMatmulPreferenceDestroy(p); }
using MatmulDesc = ScopedResource<cublasLtMatmulDesc_t, destroyMatmulDesc>;
using Layout = ScopedResource<cublasLtMatrixLayout_t, destroyLayout>;
using Preference = ScopedResource<cublasLtMatmulPreference_t, destroyPreference>;

cudaDataType_t cudaType(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

// The operation and the three layouts of one problem (C and D share a layout; beta = 0).
struct Problem {
  MatmulDesc op;
  Layout a;  // cuBLAS A = our B: K×N column-major, transposed
  Layout b;  // cuBLAS B = our A: K×M column-major
  Layout d;  // N×M column-major = our row-major M×N
};

Status makeProblem(int64_t m, int64_t n, int64_t k, DType in, DType out, Problem& p) {
  cublasLtMatmulDesc_t op = nullptr;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  p.op.reset(op);
  const cublasOperation_t trans_a = CUBLAS_OP_T;
  const cublasOperation_t trans_b = CUBLAS_OP_N;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                        sizeof(trans_a)));
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                        sizeof(trans_b)));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  cublasLtMatrixLayout_t layout = nullptr;
  DETRACE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout, cudaType(in), u(k), u(n), k));
  p.a.reset(layout);
  DETRACE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout, cudaType(in), u(k), u(m), k));
  p.b.reset(layout);
  DETRACE_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout, cudaType(out), u(n), u(m), n));
  p.d.reset(layout);
  return Status::ok();
}

Status makePreference(size_t workspace_bytes, uint32_t alignment, Preference& pref) {
  cublasLtMatmulPreference_t p = nullptr;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&p));
  pref.reset(p);
  const uint64_t ws = workspace_bytes;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  for (const auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    DETRACE_CUBLASLT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(p, attr, &alignment, sizeof(alignment)));
  }
  return Status::ok();
}

template <typename T>
Status readConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                  T& value) {
  size_t written = 0;
  DETRACE_CUBLASLT_CHECK(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return Status::ok();
}

Result<CublasLtAlgoInfo> describe(const cublasLtMatmulAlgo_t& algo, size_t workspace_bytes) {
  CublasLtAlgoInfo info;
  DETRACE_RETURN_IF_ERROR(readConfig(algo, CUBLASLT_ALGO_CONFIG_ID, info.algo_id));
  DETRACE_RETURN_IF_ERROR(readConfig(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, info.tile_id));
  DETRACE_RETURN_IF_ERROR(readConfig(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, info.stages_id));
  DETRACE_RETURN_IF_ERROR(readConfig(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, info.splitk_num));
  DETRACE_RETURN_IF_ERROR(
      readConfig(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, info.reduction_scheme));
  DETRACE_RETURN_IF_ERROR(readConfig(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, info.cta_swizzling));
  DETRACE_RETURN_IF_ERROR(readConfig(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, info.custom_option));
  DETRACE_RETURN_IF_ERROR(
      readConfig(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, info.inner_shape_id));
  DETRACE_RETURN_IF_ERROR(
      readConfig(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, info.cluster_shape_id));
  info.workspace_bytes = workspace_bytes;
  return info;
}

bool noSplitNoReduction(const CublasLtAlgoInfo& info) {
  return info.splitk_num <= 1 && info.reduction_scheme == CUBLASLT_REDUCTION_SCHEME_NONE;
}

// Largest power of two (<= 256) dividing every pointer of the call.
int alignmentOf(const GemmArgs& args) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(args.a) | reinterpret_cast<uintptr_t>(args.b) |
                   reinterpret_cast<uintptr_t>(args.d) | uintptr_t{256};
  return static_cast<int>(bits & (~bits + 1));
}

}  // namespace

std::string CublasLtAlgoInfo::toString() const {
  return fmt::format("algo {} tile {} stages {} splitK {} reduction {} swizzle {} custom {} "
                     "inner {} cluster {} workspace {}",
                     algo_id, tile_id, stages_id, splitk_num, reduction_scheme, cta_swizzling,
                     custom_option, inner_shape_id, cluster_shape_id, workspace_bytes);
}

Result<CublasLtGemm> CublasLtGemm::create(const Options& options) {
  if (options.representative_m < 1) {
    return makeError(ErrorCode::kInvalidArgument, "CublasLtGemm: representative_m must be >= 1");
  }
  CublasLtGemm g;
  g.options_ = options;
  cublasLtHandle_t handle = nullptr;
  DETRACE_CUBLASLT_CHECK(cublasLtCreate(&handle));
  g.handle_.reset(handle);
  const size_t ws = std::max(options.pinned_workspace_bytes, options.heuristic_workspace_bytes);
  if (ws > 0) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, ws);
    if (err != cudaSuccess) {
      return makeError(ErrorCode::kUnavailable, "cudaMalloc({} bytes) for the cuBLASLt workspace "
                       "failed: {}", ws, cudaGetErrorString(err));
    }
    g.workspace_.reset(p);
  }
  return g;
}

Result<CublasLtGemm::Choice> CublasLtGemm::choosePinned(int64_t n, int64_t k, DType in,
                                                        DType out) {
  const Key key{-1, n, k, static_cast<int>(in), static_cast<int>(out), 16};
  if (auto it = choices_.find(key); it != choices_.end()) return it->second;
  Problem rep;
  DETRACE_RETURN_IF_ERROR(makeProblem(options_.representative_m, n, k, in, out, rep));
  Problem one;  // the algorithm must also serve a single row
  DETRACE_RETURN_IF_ERROR(makeProblem(1, n, k, in, out, one));
  Preference pref;
  DETRACE_RETURN_IF_ERROR(makePreference(options_.pinned_workspace_bytes, 16, pref));
  std::array<cublasLtMatmulHeuristicResult_t, 16> results{};
  int returned = 0;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulAlgoGetHeuristic(
      handle_.get(), rep.op.get(), rep.a.get(), rep.b.get(), rep.d.get(), rep.d.get(), pref.get(),
      static_cast<int>(results.size()), results.data(), &returned));
  // Candidates in heuristic order; the first one also forced to split-K 1 / no reduction.
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < returned; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      cublasLtMatmulAlgo_t algo = results[i].algo;
      if (pass == 1) {
        const int32_t one_split = 1;
        const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
        DETRACE_CUBLASLT_CHECK(cublasLtMatmulAlgoConfigSetAttribute(
            &algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one_split, sizeof(one_split)));
        DETRACE_CUBLASLT_CHECK(cublasLtMatmulAlgoConfigSetAttribute(
            &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof(none)));
      }
      DETRACE_ASSIGN_OR_RETURN(CublasLtAlgoInfo info, describe(algo, results[i].workspaceSize));
      if (!noSplitNoReduction(info)) continue;
      cublasLtMatmulHeuristicResult_t check_rep{};
      cublasLtMatmulHeuristicResult_t check_one{};
      if (cublasLtMatmulAlgoCheck(handle_.get(), rep.op.get(), rep.a.get(), rep.b.get(),
                                  rep.d.get(), rep.d.get(), &algo, &check_rep) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCheck(handle_.get(), one.op.get(), one.a.get(), one.b.get(),
                                  one.d.get(), one.d.get(), &algo, &check_one) !=
              CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      if (check_rep.workspaceSize > options_.pinned_workspace_bytes ||
          check_one.workspaceSize > options_.pinned_workspace_bytes) {
        continue;
      }
      info.workspace_bytes = std::max(check_rep.workspaceSize, check_one.workspaceSize);
      Choice choice{algo, info};
      choices_.emplace(key, choice);
      return choice;
    }
  }
  return makeError(ErrorCode::kUnavailable,
                   "cuBLASLt offers no algorithm with split-K 1, no reduction and <= {} bytes of "
                   "workspace for N = {}, K = {}, {} -> {} ({} candidates at M = {})",
                   options_.pinned_workspace_bytes, n, k, dtypeName(in), dtypeName(out),
                   returned, options_.representative_m);
}

Result<CublasLtGemm::Choice> CublasLtGemm::chooseHeuristic(const GemmArgs& args, int alignment) {
  const Key key{args.m, args.n, args.k, static_cast<int>(args.in_type),
                static_cast<int>(args.out_type), alignment};
  if (auto it = choices_.find(key); it != choices_.end()) return it->second;
  Problem p;
  DETRACE_RETURN_IF_ERROR(makeProblem(args.m, args.n, args.k, args.in_type, args.out_type, p));
  Preference pref;
  DETRACE_RETURN_IF_ERROR(makePreference(options_.heuristic_workspace_bytes,
                                         static_cast<uint32_t>(alignment), pref));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.op.get(), p.a.get(),
                                                        p.b.get(), p.d.get(), p.d.get(),
                                                        pref.get(), 1, &result, &returned));
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    return makeError(ErrorCode::kUnavailable, "cublasLtMatmulAlgoGetHeuristic found no algorithm "
                     "for M = {}, N = {}, K = {}", args.m, args.n, args.k);
  }
  DETRACE_ASSIGN_OR_RETURN(CublasLtAlgoInfo info, describe(result.algo, result.workspaceSize));
  Choice choice{result.algo, info};
  choices_.emplace(key, choice);
  return choice;
}

Status CublasLtGemm::run(const GemmArgs& args, const Choice& choice, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  Problem p;
  DETRACE_RETURN_IF_ERROR(makeProblem(args.m, args.n, args.k, args.in_type, args.out_type, p));
  const float alpha = 1.0f;
  const float beta = 0.0f;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmul(handle_.get(), p.op.get(), &alpha, args.b, p.a.get(),
                                        args.a, p.b.get(), &beta, args.d, p.d.get(), args.d,
                                        p.d.get(), &choice.algo, workspace, workspace_bytes,
                                        stream));
  return Status::ok();
}

Status CublasLtGemm::gemmPinned(const GemmArgs& args, cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(validateGemm(args));
  if (args.m == 0) return Status::ok();
  DETRACE_ASSIGN_OR_RETURN(Choice choice, choosePinned(args.n, args.k, args.in_type, args.out_type));
  const size_t ws = options_.pinned_workspace_bytes;
  return run(args, choice, ws > 0 ? workspace_.get() : nullptr, ws, stream);
}

Status CublasLtGemm::gemmHeuristic(const GemmArgs& args, cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(validateGemm(args));
  if (args.m == 0) return Status::ok();
  DETRACE_ASSIGN_OR_RETURN(Choice choice, chooseHeuristic(args, alignmentOf(args)));
  const size_t ws = options_.heuristic_workspace_bytes;
  return run(args, choice, ws > 0 ? workspace_.get() : nullptr, ws, stream);
}

Result<CublasLtGemm::Choice> CublasLtGemm::chooseGiven(const GemmArgs& args,
                                                       const CublasLtAlgoInfo& config) {
  Problem p;
  DETRACE_RETURN_IF_ERROR(makeProblem(args.m, args.n, args.k, args.in_type, args.out_type, p));
  const size_t ws = options_.heuristic_workspace_bytes;
  auto fits = [&](const cublasLtMatmulAlgo_t& algo) {
    cublasLtMatmulHeuristicResult_t check{};
    return cublasLtMatmulAlgoCheck(handle_.get(), p.op.get(), p.a.get(), p.b.get(), p.d.get(),
                                   p.d.get(), &algo, &check) == CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= ws;
  };
  // 1. The configuration as given (inner and cluster shape only when known, i.e. non-zero).
  Choice choice;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulAlgoInit(
      handle_.get(), CUBLAS_COMPUTE_32F, CUDA_R_32F, cudaType(args.in_type), cudaType(args.in_type),
      cudaType(args.out_type), cudaType(args.out_type), config.algo_id, &choice.algo));
  auto set = [&](cublasLtMatmulAlgoConfigAttributes_t attr, const auto& value) {
    return cublasLtMatmulAlgoConfigSetAttribute(&choice.algo, attr, &value, sizeof(value));
  };
  bool ok = set(CUBLASLT_ALGO_CONFIG_TILE_ID, config.tile_id) == CUBLAS_STATUS_SUCCESS &&
            set(CUBLASLT_ALGO_CONFIG_STAGES_ID, config.stages_id) == CUBLAS_STATUS_SUCCESS &&
            set(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, config.splitk_num) == CUBLAS_STATUS_SUCCESS &&
            set(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, config.reduction_scheme) ==
                CUBLAS_STATUS_SUCCESS &&
            set(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, config.cta_swizzling) == CUBLAS_STATUS_SUCCESS &&
            set(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, config.custom_option) == CUBLAS_STATUS_SUCCESS;
  if (ok && config.inner_shape_id != 0) {
    ok = set(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, config.inner_shape_id) == CUBLAS_STATUS_SUCCESS;
  }
  if (ok && config.cluster_shape_id != 0) {
    ok = set(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, config.cluster_shape_id) == CUBLAS_STATUS_SUCCESS;
  }
  if (ok && fits(choice.algo)) {
    DETRACE_ASSIGN_OR_RETURN(choice.info, describe(choice.algo, 0));
    return choice;
  }
  // 2. Traces may lack the inner and cluster shape, without which Hopper kernels are rejected:
  //    take the heuristic's candidate for this problem whose recorded fields all match.
  Preference pref;
  DETRACE_RETURN_IF_ERROR(makePreference(ws, static_cast<uint32_t>(alignmentOf(args)), pref));
  std::array<cublasLtMatmulHeuristicResult_t, 64> results{};
  int returned = 0;
  DETRACE_CUBLASLT_CHECK(cublasLtMatmulAlgoGetHeuristic(
      handle_.get(), p.op.get(), p.a.get(), p.b.get(), p.d.get(), p.d.get(), pref.get(),
      static_cast<int>(results.size()), results.data(), &returned));
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    DETRACE_ASSIGN_OR_RETURN(CublasLtAlgoInfo info, describe(results[i].algo, results[i].workspaceSize));
    if (info.algo_id == config.algo_id && info.tile_id == config.tile_id &&
        info.stages_id == config.stages_id && info.splitk_num == config.splitk_num &&
        info.reduction_scheme == config.reduction_scheme &&
        info.cta_swizzling == config.cta_swizzling && info.custom_option == config.custom_option &&
        fits(results[i].algo)) {
      return Choice{results[i].algo, info};
    }
  }
  return makeError(ErrorCode::kUnavailable,
                   "cuBLASLt accepts no algorithm with the configuration {} for M = {}, N = {}, "
                   "K = {} (as given, or among its {} heuristic candidates)",
                   config.toString(), args.m, args.n, args.k, returned);
}

Status CublasLtGemm::gemmWithAlgo(const GemmArgs& args, const CublasLtAlgoInfo& config,
                                  cudaStream_t stream) {
  DETRACE_RETURN_IF_ERROR(validateGemm(args));
  if (args.m == 0) return Status::ok();
  DETRACE_ASSIGN_OR_RETURN(Choice choice, chooseGiven(args, config));
  const size_t ws = options_.heuristic_workspace_bytes;
  return run(args, choice, ws > 0 ? workspace_.get() : nullptr, ws, stream);
}

Result<CublasLtAlgoInfo> CublasLtGemm::pinnedAlgo(int64_t n, int64_t k, DType in,
                                                  DType out) {
  DETRACE_ASSIGN_OR_RETURN(Choice choice, choosePinned(n, k, in, out));
  return choice.info;
}

Result<CublasLtAlgoInfo> CublasLtGemm::heuristicAlgo(const GemmArgs& args) {
  DETRACE_RETURN_IF_ERROR(validateGemm(args));
  DETRACE_ASSIGN_OR_RETURN(Choice choice, chooseHeuristic(args, alignmentOf(args)));
  return choice.info;
}

}  // namespace detrace::kernels
