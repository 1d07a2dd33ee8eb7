// detrace's own GEMM kernels: D[M,N] = A[M,K] · B[N,K]ᵀ (layout and requirements: gemm_types.h),
// plus the planted batch-variant GEMM that the tests and the replay analysis use as a known-bad
// example. The cuBLASLt wrapper is in gemm_cublaslt.h, the fp64 CPU twin in gemm_reference.h;
// docs/gemm.md explains the guarantees and the numbers.
//
// Batch invariance by construction: each kernel uses one tile shape for every M, no split-K, and
// walks K in the same order for every output element; the M edge is handled by predication (the
// mma.sync kernel) or by TMA's zero fill (the wgmma kernel), never by switching kernels. The choice
// of kernel depends on the device only (kAuto), never on the problem.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "detrace/base/status.h"
#include "detrace/kernels/gemm_types.h"

namespace detrace::kernels {

// Which of our kernels runs. The two are each deterministic and batch-invariant, but they are not
// bit-identical to each other: pick one per deployment, not per call.
enum class GemmKernel {
  kAuto,     // kWgmma on compute capability 9.0 (Hopper), kMmaSync elsewhere (8.0 or newer)
  kMmaSync,  // mma.sync m16n8k16 + cp.async + ldmatrix, 128×256×32 tiles, 4 stages (sm_80+)
  kWgmma,    // wgmma m64n256k16 + TMA, 128×256×64 tiles, 4 stages, warp-specialized (sm_90a)
};

const char* gemmKernelName(GemmKernel kernel);

// Checks shape, types, alignment and pointers against the requirements in gemm_types.h.
// kInvalidArgument names the first broken requirement. No CUDA call.
Status validateGemm(const GemmArgs& args);

// Resolves kAuto for the current device (kUnavailable without a usable device).
Result<GemmKernel> resolveGemmKernel(GemmKernel kernel);

// Deterministic (bit-identical across runs) and batch-invariant (row i of D depends only on row i
// of A, on B, and on the kernel; never on the other rows or on M). Enqueues on `stream`; returns
// kInvalidArgument for a bad call, kUnavailable when the kernel cannot run on this device, and
// kInternal naming the CUDA call that failed otherwise.
Status gemmBatchInvariant(const GemmArgs& args, cudaStream_t stream,
                          GemmKernel kernel = GemmKernel::kAuto);

// ---- Planted defect: never used by default. -------------------------------------------------
// Deterministic but NOT batch-invariant, on purpose: like a library heuristic that flips at a
// token count, it splits K four ways when M <= 64 (fp32 partials summed in a fixed order by a
// second kernel) and not at all when M > 64, so a row's bits depend on how many rows came with it.
inline constexpr int64_t kPlantedSplitKMaxM = 64;
inline constexpr int kPlantedSplitK = 4;

// Device workspace `planted_splitKGemm` needs for these args (0 when M > kPlantedSplitKMaxM).
size_t planted_splitKWorkspaceBytes(const GemmArgs& args);

// Runs the planted GEMM with the mma.sync kernel; `workspace` must hold
// planted_splitKWorkspaceBytes(args) bytes, 16-byte aligned.
Status planted_splitKGemm(const GemmArgs& args, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);

}  // namespace detrace::kernels
