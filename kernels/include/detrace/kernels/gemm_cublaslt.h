// cuBLASLt behind detrace's GEMM layout (gemm_types.h: D[M,N] = A[M,K] · B[N,K]ᵀ, all row-major).
//
// cuBLASLt picks an algorithm per problem shape: for another M (another batch size) it may pick
// another tile, another split-K or a stream-K style kernel, and a row's bits change with the batch.
// `gemmPinned` removes that freedom: one algorithm per (N, K, types), chosen once at a
// representative M with split-K 1 and no reduction scheme, verified by cublasLtMatmulAlgoCheck at
// that M and at M = 1, then used unchanged for every M. `gemmHeuristic` is cuBLASLt's own
// per-shape choice, kept as the performance baseline and as a realistic batch-variant path.
//
// Column-major mapping: row-major D (M×N) is column-major Dᵀ (N×M), and Dᵀ = op(B)·A with cuBLAS
// "A" = our B (K×N column-major, ld K, transposed), cuBLAS "B" = our A (K×M, ld K), so cuBLAS's
// (m, n, k) = (N, M, K) and the batch dimension is cuBLAS's n.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "detrace/base/scoped.h"
#include "detrace/base/status.h"
#include "detrace/kernels/gemm_types.h"

namespace detrace::kernels {

// The configuration of one cuBLASLt algorithm, as cublasLtMatmulAlgoConfigGetAttribute reports it.
struct CublasLtAlgoInfo {
  int32_t algo_id = -1;
  uint32_t tile_id = 0;
  uint32_t stages_id = 0;
  int32_t splitk_num = 1;
  uint32_t reduction_scheme = 0;
  uint32_t cta_swizzling = 0;
  uint32_t custom_option = 0;
  uint16_t inner_shape_id = 0;
  uint16_t cluster_shape_id = 0;
  size_t workspace_bytes = 0;  // what cublasLtMatmulAlgoCheck asked for at the chosen shape

  std::string toString() const;
};

inline void destroyCublasLt(cublasLtHandle_t h) { cublasLtDestroy(h); }
inline void freeDeviceMemory(void* p) { cudaFree(p); }

// Owns a cuBLASLt handle, a workspace and the algorithm choices. Not thread-safe: one per thread
// (or per stream) of callers. Requires a CUDA device.
class CublasLtGemm {
 public:
  struct Options {
    // M at which the pinned algorithm is chosen (once per N, K, types); used for every M.
    int64_t representative_m = 4096;
    // Workspace the pinned algorithm may use. Not 0: on an H200 with cuBLAS 13.0 every
    // candidate for bf16 4096×4096 asks for 4 bytes, so 0 leaves no algorithm at all. Split-K
    // partials are excluded by the split-K 1 / no-reduction filter, not by the size.
    size_t pinned_workspace_bytes = size_t{32} << 20;
    // Workspace for gemmHeuristic (32 MiB is what NVIDIA recommends for Hopper).
    size_t heuristic_workspace_bytes = size_t{32} << 20;
  };

  static Result<CublasLtGemm> create(const Options& options);
  static Result<CublasLtGemm> create() { return create(Options{}); }

  // Deterministic and batch-invariant: the same algorithm for every M at this (N, K, types);
  // row i of D depends only on row i of A and on B. Fails (kUnavailable) when no algorithm with
  // split-K 1 and no reduction passes cublasLtMatmulAlgoCheck.
  Status gemmPinned(const GemmArgs& args, cudaStream_t stream);

  // cuBLASLt's heuristic choice for this exact shape (cached per shape): deterministic for a
  // fixed shape, but NOT batch-invariant. Baseline only.
  Status gemmHeuristic(const GemmArgs& args, cudaStream_t stream);

  // cuBLASLt with a caller-given algorithm (e.g. one recorded in a trace, for replay):
  // `config.algo_id` initialised for this problem's types with its tile, stages, split-K,
  // reduction scheme, CTA swizzling and custom option (inner and cluster shape when non-zero),
  // checked with cublasLtMatmulAlgoCheck; when cuBLASLt rejects that (Hopper kernels need their
  // cluster shape, which traces may lack), the first of cuBLASLt's heuristic candidates for this
  // problem whose fields all match `config`. kUnavailable when neither exists or it needs more
  // workspace than the heuristic's.
  Status gemmWithAlgo(const GemmArgs& args, const CublasLtAlgoInfo& config, cudaStream_t stream);

  // The pinned algorithm for (N, K, types), choosing it now if needed.
  Result<CublasLtAlgoInfo> pinnedAlgo(int64_t n, int64_t k, DType in, DType out);
  // The algorithm gemmHeuristic uses for this shape and these pointers' alignment.
  Result<CublasLtAlgoInfo> heuristicAlgo(const GemmArgs& args);

 private:
  using Handle = ScopedResource<cublasLtHandle_t, destroyCublasLt>;
  using DeviceBuffer = ScopedResource<void*, freeDeviceMemory>;
  struct Choice {
    cublasLtMatmulAlgo_t algo{};
    CublasLtAlgoInfo info;
  };
  // (m, n, k, in, out, alignment); m = -1 and alignment = 16 for pinned choices.
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int>;

  CublasLtGemm() = default;
  Result<Choice> choosePinned(int64_t n, int64_t k, DType in, DType out);
  Result<Choice> chooseHeuristic(const GemmArgs& args, int alignment);
  Result<Choice> chooseGiven(const GemmArgs& args, const CublasLtAlgoInfo& config);
  Status run(const GemmArgs& args, const Choice& choice, void* workspace, size_t workspace_bytes,
             cudaStream_t stream);

  Options options_;
  Handle handle_;
  DeviceBuffer workspace_;
  std::map<Key, Choice> choices_;
};

}  // namespace detrace::kernels
